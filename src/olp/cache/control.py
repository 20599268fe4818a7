"""The cache seen from outside the server: `olp cache stats|clear` and their hand-off.

The server keeps the cache's index in memory, so a clear from the CLI (another process)
deletes the rows on disk *and* leaves a request in the `control` table; the running server
polls it every second and drops the same entries from memory (`take_clear_requests`).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from olp.cache._disk import MIGRATIONS
from olp.cache.facade import CACHE_FILE
from olp.storage import open_database

__all__ = ["disk_stats", "request_clear", "take_clear_requests"]

ALL = "*"


def _connect(home: Path) -> sqlite3.Connection:
    return open_database(home / CACHE_FILE, MIGRATIONS, check_same_thread=False)


def _connect_polled(path: Path) -> sqlite3.Connection:
    # The server opened (checked and migrated) this file at start, and polls it every
    # second: `open_database` would run `PRAGMA quick_check` over the whole file each time,
    # work that grows with the cache.
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 2000")
    return conn


def request_clear(home: Path, namespace: str | None) -> int:
    """Delete stored answers (one namespace, or all) and tell a running server to follow."""
    conn = _connect(home)
    try:
        conn.execute("BEGIN IMMEDIATE")
        if namespace is None:
            deleted = conn.execute("DELETE FROM entries").rowcount
        else:
            deleted = conn.execute("DELETE FROM entries WHERE namespace = ?", (namespace,)).rowcount
        conn.execute(
            "INSERT INTO control (action, namespace, requested_at) VALUES ('clear', ?, ?)",
            (namespace or ALL, time.time()),
        )
        conn.execute("COMMIT")
        return int(deleted)
    finally:
        conn.close()


def take_clear_requests(home: Path) -> list[str | None]:
    """Pending clears (None = everything), removed as they are returned."""
    path = home / CACHE_FILE
    if not path.exists():
        return []
    conn = _connect_polled(path)
    try:
        # Read first: the write lock is taken only when a request is waiting, so the poll
        # never makes the cache's writer thread wait.
        if conn.execute("SELECT 1 FROM control LIMIT 1").fetchone() is None:
            return []
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute("SELECT namespace FROM control WHERE action = 'clear'").fetchall()
        conn.execute("DELETE FROM control")
        conn.execute("COMMIT")
    finally:
        conn.close()
    return [None if ns == ALL else ns for (ns,) in rows]


def disk_stats(home: Path) -> dict[str, Any]:
    """Entries and bytes per namespace, as stored on disk."""
    path = home / CACHE_FILE
    if not path.exists():
        return {"entries": 0, "bytes": 0, "namespaces": {}}
    conn = _connect(home)
    try:
        rows = conn.execute(
            "SELECT namespace, COUNT(*), COALESCE(SUM(nbytes), 0) FROM entries "
            "WHERE expires_at > ? GROUP BY namespace ORDER BY namespace",
            (time.time(),),
        ).fetchall()
    finally:
        conn.close()
    per = {ns: {"entries": n, "bytes": b} for ns, n, b in rows}
    return {
        "entries": sum(v["entries"] for v in per.values()),
        "bytes": sum(v["bytes"] for v in per.values()),
        "namespaces": per,
    }
