"""The in-memory store: per-namespace LRU with TTL, under a total memory budget.

On its own it is the whole cache (no `$OLP_HOME`, or the disk is unusable); inside
`SqliteStore` it is the hot front holding the most recently used answers. A lookup is two
dict operations and a clock read.
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

__all__ = ["DEFAULT_MEMORY_BYTES", "Clock", "MemoryStore", "memory_weight"]

log = event_logger("olp.cache")

Clock = Callable[[], float]
# Bounds the answers held in memory across all namespaces (see `memory_weight`).
DEFAULT_MEMORY_BYTES = 64 * 1024 * 1024
# Rough Python-object overhead of one decoded event beyond its encoded bytes.
_EVENT_OVERHEAD = 120


def memory_weight(answer: CachedAnswer) -> int:
    """Approximate memory an entry holds: decoded events weigh more than their encoding."""
    return answer.nbytes + _EVENT_OVERHEAD * len(answer.events)


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
        self._spaces: dict[str, OrderedDict[str, CachedAnswer]] = {}
        # Global recency across namespaces, for the memory budget; value = weight.
        self._lru: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._total = 0

    # -- reads ---------------------------------------------------------------------------

    def lookup(self, namespace: str, key: str) -> CachedAnswer | None:
        space = self._spaces.get(namespace)
        if space is None:
            return None
        answer = space.get(key)
        if answer is None:
            return None
        if answer.expires_at <= self._clock():
            self.delete(namespace, key)
            return None
        space.move_to_end(key)
        self._lru.move_to_end((namespace, key))
        return answer

    async def get(self, namespace: str, key: str) -> CachedAnswer | None:
        return self.lookup(namespace, key)

    # -- writes --------------------------------------------------------------------------

    def new_answer(self, events: Sequence[Event], body: bytes) -> CachedAnswer | None:
        """Stamp an answer (`body` = its encoding) with size and expiry; None: do not cache."""
        cfg = self._config
        if cfg.ttl_s <= 0:
            return None
        nbytes = len(body)
        if nbytes > cfg.max_entry_bytes:
            log.info("cache_skip_oversize", nbytes=nbytes, max_entry_bytes=cfg.max_entry_bytes)
            return None
        now = self._clock()
        return CachedAnswer(tuple(events), nbytes, now, now + cfg.ttl_s)

    def put(self, namespace: str, key: str, events: Sequence[Event]) -> bool:
        answer = self.new_answer(events, encode_events(events))
        if answer is None:
            return False
        self.insert(namespace, key, answer)
        return True

    def insert(self, namespace: str, key: str, answer: CachedAnswer) -> None:
        """Hold `answer` (already stamped), evicting per-namespace and global LRU entries."""
        weight = memory_weight(answer)
        self.delete(namespace, key)
        if weight > self._max_total:
            return
        space = self._spaces.get(namespace)
        if space is None:
            space = self._spaces[namespace] = OrderedDict()
        space[key] = answer
        self._lru[(namespace, key)] = weight
        self._total += weight
        while len(space) > self._config.max_entries_per_key:
            self.delete(namespace, next(iter(space)))
        while self._total > self._max_total:
            self.delete(*next(iter(self._lru)))

    def delete(self, namespace: str, key: str) -> bool:
        space = self._spaces.get(namespace)
        if space is None or space.pop(key, None) is None:
            return False
        self._total -= self._lru.pop((namespace, key))
        if not space:
            del self._spaces[namespace]
        return True

    def clear(self, namespace: str | None = None) -> int:
        names = list(self._spaces) if namespace is None else [namespace]
        dropped = 0
        for name in names:
            for key in list(self._spaces.get(name, ())):
                dropped += self.delete(name, key)
        return dropped

    # -- bookkeeping ---------------------------------------------------------------------

    def stats(self, namespace: str | None = None) -> StoreStats:
        names = list(self._spaces) if namespace is None else [namespace]
        self._purge_expired(names)
        entries = total = 0
        for name in names:
            for answer in self._spaces.get(name, {}).values():
                entries += 1
                total += answer.nbytes
        return StoreStats(entries, total)

    def namespaces(self) -> list[str]:
        return sorted(self._spaces)

    @property
    def memory_bytes(self) -> int:
        return self._total

    async def aclose(self) -> None:
        return None

    def _purge_expired(self, names: list[str]) -> None:
        now = self._clock()
        for name in names:
            space = self._spaces.get(name)
            if space is None:
                continue
            for key in [k for k, a in space.items() if a.expires_at <= now]:
                self.delete(name, key)
