"""The cache's SQLite file: opening it (and moving a bad one aside), and its writer thread.

The cache file is disposable, unlike the keys/ledger database: every entry in it can be
recomputed by asking the upstream again, whereas keys and the ledger are the owner's data.
So where `olp.storage` refuses to touch a damaged file and stops OLP, the cache moves a
damaged file aside (`cache.db.corrupt-<timestamp>`, kept for a post-mortem), logs a warning
and starts a fresh one; and if even that fails, OLP keeps serving with a memory-only cache.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from olp.observability import event_logger
from olp.storage import DatabaseError, Migration, execute_rows, open_database

__all__ = [
    "MIGRATIONS",
    "DiskWriter",
    "IndexRow",
    "Row",
    "delete_rows",
    "last_id",
    "load_index",
    "open_cache_db",
    "open_reader",
]

log = event_logger("olp.cache")

# `body` is the last column so that reading the metadata (at startup) never has to follow
# a large entry's overflow pages.
MIGRATIONS = (
    Migration(
        1,
        """
        CREATE TABLE entries (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            nbytes INTEGER NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            used_at REAL NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (namespace, key)
        )
        """,
    ),
    # Requests from `olp cache clear` (another process) for the running server, whose
    # index lives in memory; it polls and applies them.
    Migration(
        2,
        """
        CREATE TABLE control (
            id INTEGER PRIMARY KEY,
            action TEXT NOT NULL,
            namespace TEXT,
            requested_at REAL NOT NULL
        )
        """,
    ),
    # Entries by an id the server hands out in order, not by (namespace, key): a new entry
    # is appended at the table's end, and the oldest go from its start, instead of every
    # write landing on a random page of a key index (3x the writer's work, and WAL
    # traffic). The in-memory index maps (namespace, key) to the id.
    Migration(
        3,
        """
        CREATE TABLE entries_by_id (
            id INTEGER PRIMARY KEY,
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            nbytes INTEGER NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            used_at REAL NOT NULL,
            body BLOB NOT NULL
        );
        INSERT INTO entries_by_id (namespace, key, nbytes, created_at, expires_at, used_at, body)
            SELECT namespace, key, nbytes, created_at, expires_at, used_at, body
            FROM entries ORDER BY used_at;
        DROP TABLE entries;
        ALTER TABLE entries_by_id RENAME TO entries;
        CREATE INDEX entries_namespace ON entries (namespace)
        """,
    ),
    # No index by namespace: it cost every insert and every eviction a second B-tree
    # write, to speed up only `olp cache clear NAMESPACE`, which is rare and may scan the
    # table.
    Migration(4, "DROP INDEX entries_namespace"),
)

_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def open_cache_db(path: Path) -> sqlite3.Connection | None:
    """The writer's connection, or None when the cache must live in memory only."""
    try:
        return _open(path)
    except DatabaseError as exc:
        if _is_busy(exc):
            # Another process holds it: the file may be fine, so leave it alone.
            log.warning("cache_file_unavailable", path=str(path), error=exc.message)
            return None
        moved = _move_aside(path)
        log.warning("cache_file_corrupt", path=str(path), moved_to=str(moved), error=exc.message)
    except OSError as exc:
        log.warning("cache_file_unavailable", path=str(path), error=str(exc))
        return None
    try:
        return _open(path)
    except (DatabaseError, OSError) as exc:
        log.error("cache_file_unavailable", path=str(path), error=str(exc))
        return None


def open_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection for the reader thread (WAL lets it read beside the writer)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 2000")
    conn.execute("PRAGMA query_only = ON")
    return conn


def _open(path: Path) -> sqlite3.Connection:
    # The writer thread uses the connection; check_same_thread only guards misuse.
    return open_database(path, MIGRATIONS, check_same_thread=False)


def _is_busy(exc: DatabaseError) -> bool:
    cause = exc.__cause__
    code = getattr(cause, "sqlite_errorcode", 0) or 0
    return isinstance(cause, sqlite3.Error) and (code & 0xFF) in _BUSY_CODES


def _move_aside(path: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    # The WAL and shared-memory files belong to the bad file; a fresh file must not see them.
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{path}{suffix}")
        if src.exists():
            src.rename(f"{target}{suffix}")
    return target


@dataclass(frozen=True, slots=True)
class IndexRow:
    id: int
    namespace: str
    key: str
    nbytes: int
    created_at: float
    expires_at: float


def load_index(conn: sqlite3.Connection) -> list[IndexRow]:
    """Every entry's metadata, least recently used first."""
    rows = conn.execute(
        "SELECT id, namespace, key, nbytes, created_at, expires_at FROM entries "
        "ORDER BY used_at, id"
    ).fetchall()
    return [IndexRow(*row) for row in rows]


def last_id(conn: sqlite3.Connection) -> int:
    """The highest entry id ever written (0 for an empty file); new ids count on from it."""
    (found,) = conn.execute("SELECT COALESCE(MAX(id), 0) FROM entries").fetchone()
    return int(found)


def delete_rows(conn: sqlite3.Connection, ids: list[int]) -> None:
    if ids:
        conn.executemany("DELETE FROM entries WHERE id = ?", [(i,) for i in ids])


# id, namespace, key, nbytes, created_at, expires_at, used_at, body
Row = tuple[int, str, str, int, float, float, float, bytes]


@dataclass(frozen=True, slots=True)
class _Clear:
    namespace: str | None


@dataclass(frozen=True, slots=True)
class _Touch:
    rows: list[tuple[float, int]]  # (used_at, id)


# What the writer's deque holds, told apart by type so that a put or a delete (nearly
# every op) is queued bare, with no wrapper to build: a Row is a put, an int the id of a
# row to delete; a threading.Event is set once everything before it is applied; None
# stops the thread.
Op = Row | int | _Clear | _Touch | threading.Event | None
# The writer lets writes gather for this long (a flush or close cuts it short) and applies
# them all in one transaction: a COMMIT costs as much as a few hundred small writes. A
# quarter second (the ledger's pace too) lets a batch fill 1,024-row statements under load.
_BATCH_WINDOW_S = 0.25


class DiskWriter:
    """Applies writes to the cache file from one background thread, batched per round.

    Callers only append to a deque (tens of nanoseconds, no lock, no wake-up); the writer
    comes round every `window_s` and applies everything queued in one transaction (a
    flush or close cuts the wait short). A failed write is logged and dropped, which at
    worst loses a cache entry. Every put has a new id (a replaced entry's old id is
    deleted), so within a batch a put whose id is deleted later is skipped.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        window_s: float = _BATCH_WINDOW_S,
    ) -> None:
        self._conn = conn
        # deque.append and popleft are atomic: the event loop and the writer share it bare.
        self._ops: deque[Op] = deque()
        self._window_s = window_s
        self._urgent = threading.Event()  # set by flush() and close()
        self._thread = threading.Thread(target=self._run, name="olp-cache-writer", daemon=True)
        self._closed = False
        self._thread.start()

    def put(self, row: Row) -> None:
        self._ops.append(row)

    def delete(self, entry_id: int) -> None:
        self._ops.append(entry_id)

    def clear(self, namespace: str | None) -> None:
        self._ops.append(_Clear(namespace))

    def touch(self, rows: list[tuple[float, int]]) -> None:
        """(used_at, id) pairs."""
        self._ops.append(_Touch(rows))

    def flush(self, timeout: float | None = None) -> bool:
        """Block until everything enqueued so far is on disk (or `timeout` passed)."""
        if self._closed:
            return True
        done = threading.Event()
        self._ops.append(done)
        self._urgent.set()
        return done.wait(timeout)

    def close(self) -> None:
        """Write what is pending, stop the thread, close the file. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._ops.append(None)
        self._urgent.set()
        self._thread.join()
        self._conn.close()

    def _run(self) -> None:
        ops = self._ops
        while True:
            # Idle, this is a wake-up every `window_s` that finds nothing: far cheaper
            # than waking the writer (a lock and a notify) on every write under load.
            self._urgent.wait(self._window_s)
            self._urgent.clear()
            batch = [ops.popleft() for _ in range(len(ops))]
            if batch and self._apply(batch):
                return

    def _apply(self, batch: list[Op]) -> bool:
        """Apply one batch in one transaction; True when the thread must stop."""
        try:
            self._conn.execute("BEGIN")
            _write(self._conn, batch)
            self._conn.execute("COMMIT")
        except Exception as exc:
            # A full disk or a file damaged under us: the cache loses these writes, no more.
            log.warning("cache_write_failed", error=repr(exc), ops=len(batch))
            with contextlib.suppress(sqlite3.Error):
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
        stop = False
        for op in batch:
            if type(op) is threading.Event:
                op.set()
            elif op is None:
                stop = True
        return stop


_INSERT_MANY = (
    "INSERT OR REPLACE INTO entries "
    "(id, namespace, key, nbytes, created_at, expires_at, used_at, body)"
)
_DELETE_MANY = "DELETE FROM entries WHERE id IN ("
_TOUCH_SQL = "UPDATE entries SET used_at = ? WHERE id = ?"


def _write(conn: sqlite3.Connection, batch: list[Op]) -> None:
    """Apply `batch` in order; a put deleted in the same batch is never written."""
    # Puts and deletes are of distinct ids (a put's id is new), so they commute: each run
    # between two clears or touches goes to two multi-row statements (one step, one GIL
    # hand-off, per few hundred rows). A clear or touch keeps its place.
    gone = {op for op in batch if type(op) is int}
    puts: list[Row] = []
    deletes: list[int] = []

    def drain() -> None:
        if deletes:
            execute_rows(conn, _DELETE_MANY, [(i,) for i in deletes], tail=")")
            deletes.clear()
        if puts:
            execute_rows(conn, _INSERT_MANY, puts)
            puts.clear()

    for op in batch:
        if type(op) is tuple:
            if op[0] not in gone:
                puts.append(op)
        elif type(op) is int:
            deletes.append(op)
        elif type(op) is _Clear:
            drain()
            _clear(op.namespace, conn)
        elif type(op) is _Touch:
            drain()
            conn.executemany(_TOUCH_SQL, op.rows)
    drain()


def _clear(namespace: str | None, conn: sqlite3.Connection) -> None:
    if namespace is None:
        conn.execute("DELETE FROM entries")
    else:
        conn.execute("DELETE FROM entries WHERE namespace = ?", (namespace,))
