"""The usage ledger's writer: records are queued in memory and written off the hot path.

`record_request()` / `record_attempt()` append to a deque — O(1), no I/O, no lock — and a
background thread with its own SQLite connection writes what has queued up every
`interval_s` (in transactions of at most `batch_rows`), never woken per record.
`aclose()` (the server's lifespan shutdown, so also SIGTERM) writes everything left.
The same thread deletes rows past `ledger.retention_days` (`olp.accounts.ledger_retention`).

Rows are never dropped silently. A failed write keeps its batch and retries with backoff.
If the queue still reaches `max_rows`, the writer is far behind: a warning says so, and
a new record first waits up to `block_s` for room (back-pressure on the event loop, so
the server slows to the disk's pace instead of growing without limit); if the writer
is failing, or no room appears, the record is appended to `ledger-unwritten.jsonl`
next to the database, as is anything still unwritable at close. A record that arrives
after close is written synchronously. Only if the spill file cannot be written either is
a row lost, and then with an error log and a counter.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path

import orjson

from olp.accounts.ledger_retention import Retention
from olp.accounts.ledger_rows import (
    LEDGER_FILE,
    MIGRATIONS,
    AttemptRecord,
    RequestRecord,
    insert_batch,
    row_dict,
)
from olp.observability import event_logger
from olp.storage import open_database, open_private

__all__ = ["SPILL_FILE", "Ledger"]

log = event_logger("olp.ledger")

SPILL_FILE = "ledger-unwritten.jsonl"
_Record = RequestRecord | AttemptRecord
_Item = _Record | threading.Event  # an Event is a flush marker: set once all before it is on disk
_WARN_EVERY_S = 10.0
_MAX_BACKOFF_S = 30.0
_CLOSE_TRIES = 3


class Ledger:
    def __init__(
        self,
        path: Path,
        *,
        batch_rows: int = 2048,  # per transaction: about 1,024 rows a table (olp.storage.rows)
        interval_s: float = 0.25,
        max_rows: int = 100_000,
        block_s: float = 0.25,
        busy_timeout_ms: int = 5000,
        retention: Retention | None = None,
    ) -> None:
        """Open (and migrate) `path` now, so a broken file stops the start; raise DatabaseError.

        `retention` deletes old rows (`ledger.retention_days`); by default none go.
        """
        self.path = path
        self.spill_path = path.with_name(SPILL_FILE)
        self._conn = open_database(
            path, MIGRATIONS, busy_timeout_ms=busy_timeout_ms, check_same_thread=False
        )
        self._batch_rows = batch_rows
        self._interval_s = interval_s
        self._max_rows = max_rows
        self._warn_rows = max(batch_rows, max_rows // 4)
        self._block_s = block_s
        self._queue: deque[_Item] = deque()
        self._pending: list[_Item] = []  # taken from the queue, not yet committed
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._counts_lock = threading.Lock()
        self._failing = False
        # True once the writer is gone. A plain flag, not an Event: `_put` reads it for
        # every row, and Event.is_set is a Python call; nothing ever waits on it.
        self._closed = False
        self._warned_at = -_WARN_EVERY_S
        self._spilled = 0
        self._lost = 0
        self.retention = retention or Retention(0)  # (a config reload sets its `days`)
        self._thread = threading.Thread(target=self._run, name="olp-ledger", daemon=True)
        self._thread.start()
        # A safety net for a process that exits without aclose(); aclose() removes it.
        atexit.register(self.close)

    @classmethod
    def open(cls, home: Path, retention_days: int = 0) -> Ledger:
        """The ledger of an OLP home: `$OLP_HOME/ledger.db`; raise DatabaseError."""
        return cls(home / LEDGER_FILE, retention=Retention(retention_days))

    # -- the hot path ------------------------------------------------------------------

    def record_request(self, record: RequestRecord) -> None:
        """Queue one request row (call once per request, when its response is done)."""
        self._put(record)

    def record_attempt(self, record: AttemptRecord) -> None:
        """Queue one hop-attempt row (from the engine's attempt listener)."""
        self._put(record)

    def _put(self, record: _Record) -> None:
        queue = self._queue
        # No wake-up per record: the writer comes round every `interval_s` and takes all
        # that queued. Waking it (a lock and a notify) cost as much as the record itself,
        # and each wake-up took the GIL from the event loop.
        if len(queue) >= self._warn_rows:
            self._wake.set()
            if not self._make_room():
                self._spill([record], why="backlog")
                return
        queue.append(record)
        if self._closed:  # the writer is gone (or went meanwhile): write it here
            self._write_late(self._take_queued())

    def _make_room(self) -> bool:
        """The writer is far behind: warn; at the bound, wait briefly for room."""
        depth = len(self._queue)
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            log.warning(
                "ledger_behind", queued=depth, max_rows=self._max_rows, failing=self._failing
            )
        if depth < self._max_rows:
            return True
        if self._failing:
            return False
        deadline = now + self._block_s
        while len(self._queue) >= self._max_rows and time.monotonic() < deadline:
            time.sleep(0.005)
        return len(self._queue) < self._max_rows

    # -- observability -------------------------------------------------------------------

    def queue_depth(self) -> int:
        """Rows recorded but not yet committed to the database."""
        return len(self._queue) + len(self._pending)

    def spilled_rows(self) -> int:
        """Rows written to the spill file instead of the database."""
        return self._spilled

    def lost_rows(self) -> int:
        """Rows neither in the database nor in the spill file (each one logged)."""
        return self._lost

    # -- flush and close -----------------------------------------------------------------

    def flush_sync(self, max_wait_s: float = 5.0) -> bool:
        """Wait until everything recorded before this call is on disk; False on timeout."""
        if self._stop.is_set():  # closing or closed: the final write covers it
            self._thread.join(max_wait_s)
            return not self._thread.is_alive()
        marker = threading.Event()
        self._queue.append(marker)
        self._wake.set()
        return marker.wait(max_wait_s)

    async def flush(self, max_wait_s: float = 5.0) -> bool:
        return await asyncio.to_thread(self.flush_sync, max_wait_s)

    def close(self, timeout: float = 30.0) -> None:
        """Write everything queued, stop the writer, close the file. Idempotent.

        A row recorded afterwards (a handler cancelled at shutdown runs its `finally`
        late) is still written, synchronously: closing never turns rows away.
        """
        if self._stop.is_set():
            return
        atexit.unregister(self.close)
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("ledger_close_timeout", unwritten=self.queue_depth(), file=str(self.path))
            return
        self._closed = True
        self._write_late(self._take_queued())  # recorded while the writer was finishing

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # -- the writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        delay = self._interval_s
        while not self._stop.is_set():
            self._wake.wait(delay)
            self._wake.clear()
            try:
                # What is queued now: under a flood the loop still comes round to `_stop`.
                written = self._write_queued(most=len(self._queue))
                if written:
                    self.retention.run_due(self._conn)
            except Exception:
                # The writer must outlive its own bugs: a dead writer loses everything after.
                log.error("ledger_writer_error", exc_info=True)
                written = False
            delay = self._interval_s if written else self._backoff(delay)
        self._final_write()

    def _backoff(self, delay: float) -> float:
        return min(max(delay * 2, 0.5), _MAX_BACKOFF_S)

    def _write_queued(self, most: int | None = None) -> bool:
        """Write batch after batch until the queue is empty; False if a write failed.

        `most`: at close, write only what was queued when the stop came — rows recorded
        meanwhile are close()'s to write, so a busy recorder cannot hold the writer forever.
        """
        left = most
        while self._pending or (self._queue and (left is None or left > 0)):
            taken = self._take_batch(left)
            if left is not None:
                left -= taken
            try:
                self._write_pending()
            except Exception as exc:
                if _transient(exc):
                    self._note_failure(exc)
                    return False
                self._isolate_bad_rows(exc)
        return True

    def _take_batch(self, most: int | None = None) -> int:
        queue, pending = self._queue, self._pending
        room = self._batch_rows - len(pending)
        if most is not None:
            room = min(room, most)
        taken = 0
        while queue and taken < room:
            pending.append(queue.popleft())
            taken += 1
        return taken

    def _write_pending(self) -> None:
        requests = [r for r in self._pending if isinstance(r, RequestRecord)]
        attempts = [r for r in self._pending if isinstance(r, AttemptRecord)]
        if requests or attempts:
            insert_batch(self._conn, requests, attempts)
        self._done_pending()
        if self._failing:
            self._failing = False
            log.warning("ledger_write_recovered", queued=self.queue_depth())

    def _done_pending(self) -> None:
        for item in self._pending:
            if isinstance(item, threading.Event):
                item.set()
        self._pending.clear()

    def _note_failure(self, exc: Exception) -> None:
        if not self._failing:
            log.warning(
                "ledger_write_failed", error=str(exc), queued=self.queue_depth(),
                file=str(self.path),
            )  # fmt: skip
        self._failing = True

    def _isolate_bad_rows(self, exc: Exception) -> None:
        """A row the database refuses (not a disk problem): write the rest one by one."""
        log.error("ledger_bad_batch", error=repr(exc), rows=len(self._pending))
        for item in self._pending:
            if isinstance(item, threading.Event):
                continue
            try:
                self._insert_one(item)
            except Exception as one:
                self._spill([item], why=f"refused: {one!r}")
        self._done_pending()

    def _insert_one(self, item: _Record) -> None:
        if isinstance(item, RequestRecord):
            insert_batch(self._conn, [item], [])
        else:
            insert_batch(self._conn, [], [item])

    def _final_write(self) -> None:
        for attempt in range(_CLOSE_TRIES):
            if self._write_queued(most=len(self._queue)):
                break
            time.sleep(0.2 * (attempt + 1))
        else:
            self._take_batch_all()
            self._spill(_records(self._pending), why="unwritable at close")
            self._done_pending()
        try:
            self._conn.close()
        except sqlite3.Error as exc:
            log.warning("ledger_close_failed", error=str(exc))

    def _take_batch_all(self) -> None:
        for _ in range(len(self._queue)):  # what is queued now, not what keeps coming
            self._pending.append(self._queue.popleft())

    # -- after close ---------------------------------------------------------------------

    def _take_queued(self) -> list[_Record]:
        taken: list[_Record] = []
        while True:
            try:
                item = self._queue.popleft()  # atomic: two drains never share a row
            except IndexError:
                return taken
            if isinstance(item, threading.Event):
                item.set()
            else:
                taken.append(item)

    def _write_late(self, records: list[_Record]) -> None:
        """The writer is gone: write here, on a connection of its own (rare, at shutdown)."""
        if not records:
            return
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
            try:
                conn.execute("PRAGMA busy_timeout = 1000")
                insert_batch(
                    conn,
                    [r for r in records if isinstance(r, RequestRecord)],
                    [r for r in records if isinstance(r, AttemptRecord)],
                )
            finally:
                conn.close()
        except Exception as exc:
            self._spill(records, why=f"recorded after close: {exc!r}")
            return
        log.info("ledger_late_rows", rows=len(records))

    # -- last resort ---------------------------------------------------------------------

    def _spill(self, records: Iterable[_Record], *, why: str) -> None:
        lines = b"".join(_spill_line(r) for r in records)
        count = lines.count(b"\n")
        if not count:
            return
        try:
            fd = open_private(self.spill_path, os.O_WRONLY | os.O_APPEND)
            with os.fdopen(fd, "ab") as out:
                out.write(lines)
        except OSError as exc:
            with self._counts_lock:
                self._lost += count
            log.error("ledger_rows_lost", rows=count, why=why, error=str(exc))
            return
        with self._counts_lock:
            self._spilled += count
        log.error("ledger_rows_spilled", rows=count, why=why, file=str(self.spill_path))


def _spill_line(record: _Record) -> bytes:
    try:
        # default=str: a record the database refused may hold a value JSON refuses too.
        return orjson.dumps(row_dict(record), default=str) + b"\n"
    except Exception:
        return orjson.dumps({"unreadable": repr(record)}) + b"\n"


def _transient(exc: Exception) -> bool:
    """A disk-side problem (locked, full, I/O): retry later. Else a row is at fault."""
    return isinstance(exc, sqlite3.OperationalError | sqlite3.InternalError) or (
        type(exc) is sqlite3.DatabaseError
    )


def _records(items: Iterable[_Item]) -> list[_Record]:
    return [i for i in items if not isinstance(i, threading.Event)]
