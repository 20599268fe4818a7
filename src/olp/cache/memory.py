"""The in-memory store: per-namespace LRU with TTL, under a total memory budget.

On its own it is the whole cache (no `$OLP_HOME`, or the disk is unusable). `SqliteStore`
extends it: there this index also lists the entries whose events are only on disk, and
the memory budget decides which answers stay in memory, not which entries exist.

Each entry is in two orders: its namespace's (for `max_entries_per_key`) and, while its
events are in memory, the global one (for the budget). A lookup is a dict get, two moves
to the end and a clock read; a put evicts at most one entry per limit.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from olp.cache.codec import encode_events
from olp.cache.store import CachedAnswer, StoreStats
from olp.config import CacheConfig
from olp.ir import Event
from olp.observability import event_logger

__all__ = ["DEFAULT_MEMORY_BYTES", "EVENT_OVERHEAD", "Clock", "Entry", "MemoryStore"]

log = event_logger("olp.cache")

Clock = Callable[[], float]
# Bounds the answers held in memory across all namespaces (see `Entry.weight`).
DEFAULT_MEMORY_BYTES = 64 * 1024 * 1024
# Rough Python-object overhead of one decoded event beyond its encoded bytes (an answer
# not decoded yet counts one: its bytes object).
EVENT_OVERHEAD = 120


class Entry:
    """One indexed answer; `answer` is None while its events are only on disk."""

    __slots__ = ("answer", "created_at", "expires_at", "id", "key", "namespace", "nbytes", "weight")

    def __init__(
        self,
        namespace: str,
        key: str,
        entry_id: int,
        nbytes: int,
        created_at: float,
        expires_at: float,
        answer: CachedAnswer | None,
    ) -> None:
        self.namespace = namespace
        self.key = key
        self.id = entry_id  # its row in the cache file (0 in a memory-only store)
        self.nbytes = nbytes  # size of the encoded entry; what `max_entry_bytes` limits
        self.created_at = created_at
        self.expires_at = expires_at
        self.answer = answer
        self.weight = 0  # memory held while `answer` is loaded; set by `MemoryStore.load`


class MemoryStore:
    def __init__(
        self,
        config: CacheConfig,
        clock: Clock = time.time,
        *,
        max_total_bytes: int = DEFAULT_MEMORY_BYTES,
    ) -> None:
        self._config = config
        self._clock = clock
        self._max_total = max_total_bytes
        self._spaces: dict[str, OrderedDict[str, Entry]] = {}
        # Entries whose events are in memory, least recently used first (keyed by identity).
        self._loaded: OrderedDict[Entry, None] = OrderedDict()
        self._total = 0

    # -- reads ---------------------------------------------------------------------------

    def lookup(self, namespace: str, key: str) -> CachedAnswer | None:
        entry = self.entry(namespace, key)
        return None if entry is None else entry.answer

    def entry(self, namespace: str, key: str) -> Entry | None:
        """The live entry for (namespace, key), now the most recently used; None if none."""
        space = self._spaces.get(namespace)
        if space is None:
            return None
        entry = space.get(key)
        if entry is None:
            return None
        if entry.expires_at <= self._clock():
            self.delete(namespace, key)
            return None
        space.move_to_end(key)
        if entry.answer is not None:
            self._loaded.move_to_end(entry)
        return entry

    def indexed(self, namespace: str, key: str) -> Entry | None:
        """The entry for (namespace, key) as it is: expired or not, order unchanged."""
        space = self._spaces.get(namespace)
        return None if space is None else space.get(key)

    def on_disk(self, namespace: str, key: str) -> bool:
        return False  # (no disk: an entry unloaded for the budget is gone)

    async def get(self, namespace: str, key: str) -> CachedAnswer | None:
        return self.lookup(namespace, key)

    # -- writes --------------------------------------------------------------------------

    def put(self, namespace: str, key: str, events: Sequence[Event]) -> bool:
        return self.new_entry(namespace, key, events, encode_events(events), 0) is not None

    def new_entry(
        self, namespace: str, key: str, events: Sequence[Event], body: bytes, entry_id: int
    ) -> Entry | None:
        """Index a fresh answer (`body` = its encoding) as the newest; None: not cached."""
        cfg = self._config
        if cfg.ttl_s <= 0:
            return None
        nbytes = len(body)
        if nbytes > cfg.max_entry_bytes:
            log.info("cache_skip_oversize", nbytes=nbytes, max_entry_bytes=cfg.max_entry_bytes)
            return None
        now = self._clock()
        expires = now + cfg.ttl_s
        entry = Entry(namespace, key, entry_id, nbytes, now, expires, None)
        self.index(entry)
        self.load(entry, CachedAnswer(None, nbytes, now, expires, body))  # (decoded when asked)
        return entry

    def index(self, entry: Entry) -> None:
        """Make `entry` its key's entry, the namespace's newest; evict past the entry limit."""
        space = self._spaces.get(entry.namespace)
        if space is None:
            space = self._spaces[entry.namespace] = OrderedDict()
        replaced = space.pop(entry.key, None)
        if replaced is not None:
            self._dropped(replaced)
        space[entry.key] = entry
        limit = self._config.max_entries_per_key
        while len(space) > limit:
            self._dropped(space.popitem(last=False)[1])

    def load(self, entry: Entry, answer: CachedAnswer) -> None:
        """Hold `entry`'s events in memory, unloading the least recently used past the budget."""
        weight = answer.nbytes + EVENT_OVERHEAD * (len(answer.events) if answer.decoded else 1)
        if weight > self._max_total:
            self._unload(entry)
            return
        entry.answer, entry.weight = answer, weight
        self._loaded[entry] = None
        self._total += weight
        while self._total > self._max_total:
            self._unload(next(iter(self._loaded)))

    def weigh(self, namespace: str, key: str, answer: CachedAnswer, nbytes: int) -> bool:
        entry = self.indexed(namespace, key)
        if entry is None or entry.answer is not answer:
            return False
        entry.weight += nbytes
        self._total += nbytes
        while self._total > self._max_total:
            self._unload(next(iter(self._loaded)))
        return True

    def delete(self, namespace: str, key: str) -> bool:
        space = self._spaces.get(namespace)
        entry = None if space is None else space.pop(key, None)
        if entry is None:
            return False
        if not space:
            del self._spaces[namespace]
        self._dropped(entry)
        return True

    async def aclear(self, namespace: str | None = None) -> int:
        return self.clear(namespace)

    def reconfigure(self, config: CacheConfig) -> int:
        """Apply new limits (a config reload) to the entries held; returns how many went.

        A lower `ttl_s` shortens the entries stored before it (as a restart would), a
        higher one applies to answers stored from now on; entries over a lower
        `max_entry_bytes`, and the least recently used ones past a lower
        `max_entries_per_key`, are dropped now rather than at the next write.
        """
        self._config = config
        now = self._clock()
        dropped = 0
        for space in list(self._spaces.values()):
            for entry in list(space.values()):
                entry.expires_at = min(entry.expires_at, entry.created_at + config.ttl_s)
                if entry.answer is not None:
                    entry.answer.expires_at = entry.expires_at
                if entry.expires_at <= now or entry.nbytes > config.max_entry_bytes:
                    dropped += self.delete(entry.namespace, entry.key)
            while len(space) > config.max_entries_per_key:
                oldest = next(iter(space.values()))
                dropped += self.delete(oldest.namespace, oldest.key)
        return dropped

    def clear(self, namespace: str | None = None) -> int:
        names = list(self._spaces) if namespace is None else [namespace]
        dropped = 0
        for name in names:
            space = self._spaces.pop(name, None)
            if space is not None:
                dropped += len(space)
                for entry in space.values():
                    self._free(entry)
        return dropped

    def _dropped(self, entry: Entry) -> None:
        """`entry` left the index (replaced, evicted, expired, deleted)."""
        self._free(entry)

    def _unload(self, entry: Entry) -> None:
        """Over the memory budget: with no disk behind it, the entry goes altogether."""
        self.delete(entry.namespace, entry.key)

    def _free(self, entry: Entry) -> None:
        """Let go of `entry`'s events, if they are in memory."""
        if entry.answer is not None:
            entry.answer = None
            del self._loaded[entry]
            self._total -= entry.weight

    # -- bookkeeping ---------------------------------------------------------------------

    def stats(self, namespace: str | None = None) -> StoreStats:
        names = list(self._spaces) if namespace is None else [namespace]
        now = self._clock()
        entries = total = 0
        for name in names:
            space = self._spaces.get(name)
            if space is None:
                continue
            for key in [k for k, e in space.items() if e.expires_at <= now]:
                self.delete(name, key)  # expired entries are dropped lazily: count none
            entries += len(space)
            total += sum(e.nbytes for e in space.values())
        return StoreStats(entries, total)

    def namespaces(self) -> list[str]:
        return sorted(self._spaces)

    @property
    def memory_bytes(self) -> int:
        return self._total

    @property
    def persistent(self) -> bool:
        return False

    @property
    def kind(self) -> str:
        return "memory"

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
