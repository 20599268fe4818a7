"""The persistent store: `$OLP_HOME/cache.db` behind the in-memory index of `MemoryStore`.

What lives where:
- the **index** (namespace -> key -> entry, in LRU order; `MemoryStore`'s) lists every
  entry, loaded at start: it enforces the per-namespace limits and answers "is there an
  entry?" without the disk, so a miss never waits for SQLite;
- the **events** of recently used entries are in memory too, within the memory budget: a
  hit there is the hot path and costs a few microseconds;
- the **file** holds every body. It is read only for an entry whose events are not in
  memory (after a restart, or once the budget unloaded them), in one reader thread, never
  on the event loop; it is written only by the writer thread (`DiskWriter`).

Recency (`used_at`, for LRU after a restart) is recorded in memory and handed to the
writer in batches, so a hit costs no thread wake-up.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from olp.cache._disk import (
    DiskWriter,
    delete_rows,
    last_id,
    load_index,
    open_cache_db,
    open_reader,
)
from olp.cache.codec import decode_events, encode_events
from olp.cache.memory import DEFAULT_MEMORY_BYTES, Clock, Entry, MemoryStore
from olp.cache.store import CachedAnswer
from olp.config import CacheConfig
from olp.ir import Event
from olp.observability import event_logger

__all__ = ["SqliteStore"]

log = event_logger("olp.cache")

# Recency updates wait in memory until this many pile up (or a write or close comes).
_TOUCH_BATCH = 512


_Read = tuple[bool, tuple[Event, ...] | None]  # (row found, decoded events or None)


class SqliteStore(MemoryStore):
    """A `MemoryStore` whose entries are also in a file, and whose index outlives the budget."""

    def __init__(
        self,
        path: Path,
        config: CacheConfig,
        clock: Clock = time.time,
        *,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
    ) -> None:
        super().__init__(config, clock, max_total_bytes=memory_bytes)
        self.path = path
        self._next_id = 1
        self._touched: dict[int, float] = {}  # entry id -> used_at, not yet written
        self._reads: dict[tuple[str, str], asyncio.Future[_Read]] = {}
        self._writer: DiskWriter | None = None
        self._reader: ThreadPoolExecutor | None = None
        self._reader_conn: sqlite3.Connection | None = None
        conn = open_cache_db(path)
        if conn is not None:
            self._attach(path, conn)

    def _attach(self, path: Path, conn: sqlite3.Connection) -> None:
        try:
            self._load(conn)
            self._reader_conn = open_reader(path)
        except sqlite3.Error as exc:
            # Damage that the integrity check at open did not see: serve from memory.
            log.warning("cache_file_unavailable", path=str(path), error=repr(exc))
            conn.close()
            self._spaces.clear()
            return
        self._writer = DiskWriter(conn)
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="olp-cache-reader")

    @property
    def persistent(self) -> bool:
        """False when the file could not be used and this store lives in memory only."""
        return self._writer is not None

    @property
    def kind(self) -> str:
        return "sqlite" if self.persistent else "memory"

    # -- reads ---------------------------------------------------------------------------

    def lookup(self, namespace: str, key: str) -> CachedAnswer | None:
        entry = self.entry(namespace, key)
        if entry is None or entry.answer is None:
            return None
        self._touch(entry)
        return entry.answer

    def on_disk(self, namespace: str, key: str) -> bool:
        entry = self.indexed(namespace, key)
        return entry is not None and entry.answer is None and self._reader is not None

    async def get(self, namespace: str, key: str) -> CachedAnswer | None:
        entry = self.entry(namespace, key)
        if entry is None:
            return None
        if entry.answer is not None or self._reader is None:
            self._touch(entry)
            return entry.answer
        found, events = await self._read(namespace, key, entry.id)
        if self.indexed(namespace, key) is not entry:
            # Deleted, cleared or replaced while we read: memory has any newer answer.
            return self.lookup(namespace, key)
        if events is None:
            if found:  # written by another codec version, or damaged: drop it
                self.delete(namespace, key)
            return None
        answer = entry.answer
        if answer is None:  # (else another read loaded it meanwhile)
            answer = CachedAnswer(events, entry.nbytes, entry.created_at, entry.expires_at)
            self.load(entry, answer)  # if the budget allows
        self._touch(entry)
        return answer

    async def _read(self, namespace: str, key: str, entry_id: int) -> _Read:
        # Concurrent misses on one entry share one disk read.
        pending = self._reads.get((namespace, key))
        if pending is None:
            assert self._reader is not None
            loop = asyncio.get_running_loop()
            pending = loop.run_in_executor(
                self._reader, self._read_blocking, namespace, key, entry_id
            )
            self._reads[(namespace, key)] = pending
            pending.add_done_callback(lambda _: self._reads.pop((namespace, key), None))
        return await asyncio.shield(pending)

    def _read_blocking(self, namespace: str, key: str, entry_id: int) -> _Read:
        assert self._reader_conn is not None
        try:
            row = self._reader_conn.execute(
                "SELECT body FROM entries WHERE id = ? AND namespace = ? AND key = ?",
                (entry_id, namespace, key),
            ).fetchone()
        except sqlite3.Error as exc:
            log.warning("cache_read_failed", path=str(self.path), error=repr(exc))
            return False, None
        # Not found: the writer has not written it yet; a miss, but the entry stays.
        return (False, None) if row is None else (True, decode_events(row[0]))

    # -- writes --------------------------------------------------------------------------

    def put(self, namespace: str, key: str, events: Sequence[Event]) -> bool:
        body = encode_events(events)
        entry = self.new_entry(namespace, key, events, body, self._next_id)
        if entry is None:
            return False
        self._next_id += 1
        if self._writer is not None:
            if self._touched:
                self._flush_touches()
            self._writer.put(
                (entry.id, namespace, key, entry.nbytes, entry.created_at, entry.expires_at,
                 entry.created_at, body)
            )  # fmt: skip
        return True

    def clear(self, namespace: str | None = None) -> int:
        dropped = super().clear(namespace)  # in memory; the file in one statement
        if namespace is None:
            self._touched.clear()  # (a namespace's touches are harmless: no row to update)
        if self._writer is not None:
            self._writer.clear(namespace)
        return dropped

    def _dropped(self, entry: Entry) -> None:
        self._free(entry)
        self._touched.pop(entry.id, None)
        if self._writer is not None:
            self._writer.delete(entry.id)

    def _unload(self, entry: Entry) -> None:
        # Over the memory budget: the events stay on disk, the entry in the index.
        self._free(entry)

    def _touch(self, entry: Entry) -> None:
        if self._writer is None:
            return
        self._touched[entry.id] = self._clock()
        if len(self._touched) >= _TOUCH_BATCH:
            self._flush_touches()

    def _flush_touches(self) -> None:
        if self._touched and self._writer is not None:
            rows = [(used, entry_id) for entry_id, used in self._touched.items()]
            self._touched = {}
            self._writer.touch(rows)

    # -- lifecycle -----------------------------------------------------------------------

    def _load(self, conn: sqlite3.Connection) -> None:
        """Rebuild the index from the file, dropping what expired or no longer fits."""
        cfg, now = self._config, self._clock()
        stale: list[int] = []
        for row in load_index(conn):
            # A lowered ttl_s applies to entries written before the change, too.
            expires = min(row.expires_at, row.created_at + cfg.ttl_s)
            if expires <= now or row.nbytes > cfg.max_entry_bytes:
                stale.append(row.id)
                continue
            space = self._spaces.setdefault(row.namespace, OrderedDict())
            entry = Entry(row.namespace, row.key, row.id, row.nbytes, row.created_at, expires, None)
            twin = space.pop(row.key, None)
            if twin is not None:
                # A replaced entry whose delete did not reach the file: keep the newer row.
                older, entry = (entry, twin) if twin.id > entry.id else (twin, entry)
                stale.append(older.id)
            space[row.key] = entry
            if len(space) > cfg.max_entries_per_key:
                stale.append(space.popitem(last=False)[1].id)
        delete_rows(conn, stale)
        self._next_id = last_id(conn) + 1

    def flush(self, timeout: float | None = None) -> bool:
        """Block until pending writes are on disk (tests, the CLI). Not for the event loop."""
        self._flush_touches()
        return self._writer.flush(timeout) if self._writer is not None else True

    def close(self) -> None:
        """Flush and release the file (blocking). Idempotent; the store then lives in memory."""
        _release(*self._detach())

    async def aclose(self) -> None:
        """Flush and release the file; the blocking part runs in a thread."""
        await asyncio.to_thread(_release, *self._detach())

    def _detach(
        self,
    ) -> tuple[DiskWriter | None, ThreadPoolExecutor | None, sqlite3.Connection | None]:
        self._flush_touches()
        parts = (self._writer, self._reader, self._reader_conn)
        self._writer, self._reader, self._reader_conn = None, None, None
        return parts


def _release(
    writer: DiskWriter | None, reader: ThreadPoolExecutor | None, conn: sqlite3.Connection | None
) -> None:
    if writer is not None:
        writer.close()
    if reader is not None:
        reader.shutdown(wait=True)
    if conn is not None:
        conn.close()
