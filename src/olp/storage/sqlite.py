"""Open an OLP SQLite file: WAL, a busy timeout, schema migrations, and honest errors.

A corrupted or locked file is never silently discarded or recreated: `DatabaseError` says
which file, what is wrong and how to fix it, and the caller (the CLI or the server's start)
shows that and exits.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from olp.errors import OLPError
from olp.storage.private import private_file

__all__ = ["DatabaseError", "Migration", "explain", "open_database"]


class DatabaseError(OLPError):
    code = "database_error"
    http_status = 500


@dataclass(frozen=True, slots=True)
class Migration:
    """Schema version `version` is reached by running `sql` (a script)."""

    version: int
    sql: str


def open_database(
    path: Path,
    migrations: Sequence[Migration],
    *,
    busy_timeout_ms: int = 5000,
    check_same_thread: bool = True,
) -> sqlite3.Connection:
    """Open (creating if needed, 0600) and migrate; raise DatabaseError naming the problem."""
    try:
        private_file(path)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread)
    except (sqlite3.Error, OSError) as exc:
        raise DatabaseError(f"cannot open {path}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        _check_integrity(conn, path)
        _migrate(conn, path, migrations)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise explain(path, exc) from exc
    except DatabaseError:
        conn.close()
        raise
    return conn


def _check_integrity(conn: sqlite3.Connection, path: Path) -> None:
    (result,) = conn.execute("PRAGMA quick_check").fetchone()
    if result != "ok":
        raise DatabaseError(
            f"{path} is damaged ({result}). OLP will not discard it: move it aside "
            f"(mv {path} {path}.broken) to start afresh, or restore a backup."
        )


def _migrate(conn: sqlite3.Connection, path: Path, migrations: Sequence[Migration]) -> None:
    (current,) = conn.execute("PRAGMA user_version").fetchone()
    latest = max((m.version for m in migrations), default=0)
    if current > latest:
        raise DatabaseError(
            f"{path} was written by a newer OLP (schema {current}, this one knows {latest}). "
            "Upgrade OLP, or point OLP_HOME elsewhere."
        )
    for migration in sorted(migrations, key=lambda m: m.version):
        if migration.version > current:
            conn.execute("BEGIN IMMEDIATE")
            try:
                _run_script(conn, migration.sql)
                conn.execute(f"PRAGMA user_version = {int(migration.version)}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    # executescript() would COMMIT our transaction first; run statement by statement.
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def explain(path: Path, exc: sqlite3.Error) -> DatabaseError:
    """A DatabaseError that says what is wrong with `path` and how to fix it."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return DatabaseError(
            f"{path} is locked by another process ({text}). Wait a moment and retry; if it "
            "stays locked, find the process holding it (fuser/lsof) — another OLP using this "
            "OLP_HOME?"
        )
    if "not a database" in text or "malformed" in text or "disk image" in text:
        return DatabaseError(
            f"{path} is not a valid OLP database ({text}). OLP will not discard it: move it "
            f"aside (mv {path} {path}.broken) to start afresh, or restore a backup."
        )
    return DatabaseError(f"{path}: {text}")
