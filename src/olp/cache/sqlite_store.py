"""The persistent store: `$OLP_HOME/cache.db` behind an in-memory front.

What lives where:
- the **index** (namespace -> key -> size and expiry, in LRU order) is in memory, loaded
  at start: it enforces the per-namespace limits and answers "is there an entry?" without
  the disk, so a miss never waits for SQLite;
- the **front** (`MemoryStore`) holds the bodies of recently used entries: a hit there is
  the hot path and costs a few microseconds;
- the **file** holds every body. It is read only when the index has an entry the front
  does not (after a restart, or once the front evicted it), in one reader thread, never on
  the event loop; it is written only by the writer thread (`DiskWriter`).

Recency (`used_at`, for LRU after a restart) is recorded in memory and handed to the
writer in batches, so a hit costs no thread wake-up.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from olp.cache._disk import (
    DiskWriter,
    delete_rows,
    last_id,
    load_index,
    open_cache_db,
    open_reader,
)
from olp.cache.codec import decode_events, encode_events
from olp.cache.memory import DEFAULT_MEMORY_BYTES, Clock, MemoryStore
from olp.cache.store import CachedAnswer, StoreStats
from olp.config import CacheConfig
from olp.ir import Event
from olp.observability import event_logger

__all__ = ["SqliteStore"]

log = event_logger("olp.cache")

# Recency updates wait in memory until this many pile up (or a write or close comes).
_TOUCH_BATCH = 512


class _Meta(NamedTuple):  # a tuple: built on every miss, and a frozen dataclass costs 3x
    id: int  # the entry's row in the file
    nbytes: int
    created_at: float
    expires_at: float


_Read = tuple[bool, tuple[Event, ...] | None]  # (row found, decoded events or None)


class SqliteStore:
    def __init__(
        self,
        path: Path,
        config: CacheConfig,
        clock: Clock = time.time,
        *,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
    ) -> None:
        self.path = path
        self._config = config
        self._clock = clock
        self._front = MemoryStore(config, clock, max_total_bytes=memory_bytes)
        self._index: dict[str, OrderedDict[str, _Meta]] = {}
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
            self._index.clear()
            return
        self._writer = DiskWriter(conn)
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="olp-cache-reader")

    @property
    def persistent(self) -> bool:
        """False when the file could not be used and this store lives in memory only."""
        return self._writer is not None

    # -- reads ---------------------------------------------------------------------------

    def lookup(self, namespace: str, key: str) -> CachedAnswer | None:
        answer = self._front.lookup(namespace, key)
        if answer is not None:
            self._touch(namespace, key)
        return answer

    async def get(self, namespace: str, key: str) -> CachedAnswer | None:
        answer = self.lookup(namespace, key)
        if answer is not None or self._reader is None:
            return answer
        meta = self._live_meta(namespace, key)
        if meta is None:
            return None
        found, events = await self._read(namespace, key, meta.id)
        if self._meta(namespace, key) is not meta:
            # Deleted, cleared or replaced while we read: the front has any newer answer.
            return self.lookup(namespace, key)
        if events is None:
            if found:  # written by another codec version, or damaged: drop it
                self.delete(namespace, key)
            return None
        answer = CachedAnswer(events, meta.nbytes, meta.created_at, meta.expires_at)
        self._front.insert(namespace, key, answer)
        self._touch(namespace, key)
        return answer

    def _meta(self, namespace: str, key: str) -> _Meta | None:
        space = self._index.get(namespace)
        return None if space is None else space.get(key)

    def _live_meta(self, namespace: str, key: str) -> _Meta | None:
        meta = self._meta(namespace, key)
        if meta is not None and meta.expires_at <= self._clock():
            self.delete(namespace, key)
            return None
        return meta

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
        answer = self._front.new_answer(events, body)
        if answer is None:
            return False
        self._front.insert(namespace, key, answer)
        entry_id = self._next_id
        self._next_id += 1
        meta = _Meta(entry_id, answer.nbytes, answer.created_at, answer.expires_at)
        replaced = self._index_put(namespace, key, meta)
        if self._writer is not None:
            self._flush_touches()
            self._writer.put(
                (entry_id, namespace, key, meta.nbytes, meta.created_at, meta.expires_at,
                 meta.created_at, body)
            )  # fmt: skip
            if replaced is not None:
                self._drop_row(replaced.id)
        return True

    def delete(self, namespace: str, key: str) -> bool:
        self._front.delete(namespace, key)
        space = self._index.get(namespace)
        meta = None if space is None else space.pop(key, None)
        if meta is None:
            return False
        if not space:
            del self._index[namespace]
        self._drop_row(meta.id)
        return True

    def _drop_row(self, entry_id: int) -> None:
        self._touched.pop(entry_id, None)
        if self._writer is not None:
            self._writer.delete(entry_id)

    def clear(self, namespace: str | None = None) -> int:
        self._front.clear(namespace)
        if namespace is None:
            dropped = sum(len(space) for space in self._index.values())
            self._index.clear()
            self._touched.clear()
        else:
            gone: Mapping[str, _Meta] = self._index.pop(namespace, {})
            dropped = len(gone)
            for meta in gone.values():
                self._touched.pop(meta.id, None)
        if self._writer is not None:
            self._writer.clear(namespace)
        return dropped

    def _index_put(self, namespace: str, key: str, meta: _Meta) -> _Meta | None:
        """Index `meta` as the newest entry; returns the entry it replaced, if any."""
        space = self._index.get(namespace)
        if space is None:
            space = self._index[namespace] = OrderedDict()
        replaced = space.pop(key, None)
        space[key] = meta
        while len(space) > self._config.max_entries_per_key:
            self.delete(namespace, next(iter(space)))
        return replaced

    def _touch(self, namespace: str, key: str) -> None:
        space = self._index.get(namespace)
        meta = None if space is None else space.get(key)
        if space is None or meta is None:
            return
        space.move_to_end(key)
        if self._writer is not None:
            self._touched[meta.id] = self._clock()
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
            space = self._index.setdefault(row.namespace, OrderedDict())
            meta = _Meta(row.id, row.nbytes, row.created_at, expires)
            twin = space.pop(row.key, None)
            if twin is not None:
                # A replaced entry whose delete did not reach the file: keep the newer row.
                older, meta = (meta, twin) if twin.id > meta.id else (twin, meta)
                stale.append(older.id)
            space[row.key] = meta
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

    # -- bookkeeping ---------------------------------------------------------------------

    def stats(self, namespace: str | None = None) -> StoreStats:
        now = self._clock()
        names = list(self._index) if namespace is None else [namespace]
        for name in names:  # expired entries are dropped lazily; do not count them
            space = self._index.get(name)
            if space is None:
                continue
            for key in [k for k, m in space.items() if m.expires_at <= now]:
                self.delete(name, key)
        spaces = [self._index[name] for name in names if name in self._index]
        return StoreStats(
            sum(len(s) for s in spaces), sum(m.nbytes for s in spaces for m in s.values())
        )

    def namespaces(self) -> list[str]:
        return sorted(self._index)

    @property
    def memory_bytes(self) -> int:
        return self._front.memory_bytes


def _release(
    writer: DiskWriter | None, reader: ThreadPoolExecutor | None, conn: sqlite3.Connection | None
) -> None:
    if writer is not None:
        writer.close()
    if reader is not None:
        reader.shutdown(wait=True)
    if conn is not None:
        conn.close()
