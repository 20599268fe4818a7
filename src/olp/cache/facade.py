"""`ResponseCache`: the one object the engine talks to, once per hop.

    cache = ResponseCache(config.cache, config.home)
    hop = await cache.find(namespace, key)             # a stored answer, or a shared call
    if hop is None:                                    # (the engine checks its gates here)
        hop = cache.lead(namespace, key, lambda: provider.stream(req, ctx))
    # hop.outcome -> X-OLP-Cache; hop.role -> ledger; iterate and aclose() hop.events

Per hop, in this order: a stored answer (memory, then disk) is replayed; else an identical
request in flight is joined; else this request leads a new upstream call, whose answer is
written if it is complete and successful. Counters are per namespace and per hop lookup.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

from olp.cache.memory import DEFAULT_MEMORY_BYTES, EVENT_OVERHEAD, Clock, MemoryStore
from olp.cache.redis_keys import MISSING_REDIS_PACKAGE, RedisPackageMissing
from olp.cache.singleflight import SingleFlight, Start
from olp.cache.sqlite_store import SqliteStore
from olp.cache.store import CachedAnswer, Store
from olp.config import CacheConfig
from olp.ir import ChatResponse, Event, Finish, is_content

__all__ = [
    "CACHE_FILE",
    "RELOADABLE",
    "CacheHop",
    "CacheOutcome",
    "HopRole",
    "ResponseCache",
    "cache_policy",
    "is_complete",
]

CACHE_FILE = "cache.db"
# The settings a running cache takes on (`reconfigure`); the others (`enabled`,
# `redis_url`, `redis_prefix`) choose its store, and take a restart.
RELOADABLE = frozenset({"ttl_s", "max_entries_per_key", "max_entry_bytes"})
CacheOutcome = Literal["hit", "miss", "bypass"]
# stored: replayed from the cache; leader: this request's own upstream call (shared with
# any followers); follower: another request's upstream call, no cost of its own;
# direct: the cache is not involved at all.
HopRole = Literal["stored", "leader", "follower", "direct"]
# A refusal by the content filter may be transient; caching it for a day would be worse
# than asking again. "length" is a truncated (or salvaged, docs/design.md §5 rule 4) answer.
_CACHEABLE_FINISH = frozenset({"stop", "tool_calls"})


@dataclass(slots=True)
class CacheHop:
    outcome: CacheOutcome
    role: HopRole
    # Iterate it, and always aclose() it: an unclosed follower keeps the upstream alive.
    events: AsyncIterator[Event]
    # A replay's whole answer, in hand: callers may use it instead of iterating `events`.
    stored: tuple[Event, ...] | None = None
    # The cache's entry that `stored` came from, and where it is kept (a replay only).
    answer: CachedAnswer | None = None
    namespace: str = ""
    key: str = ""

    @property
    def upstream(self) -> bool:
        """This request's own call to the provider (not a replay, not someone else's)."""
        return self.role == "leader" or self.role == "direct"


def cache_policy(cache_control: str | None) -> tuple[bool, bool]:
    """(lookup, store) for a request's `Cache-Control` header (docs/design.md §7).

    `no-cache` (or `max-age=0`): do not answer from the cache, but store the fresh answer;
    `no-store`: neither.
    """
    if not cache_control:
        return True, True
    tokens = {t.strip().lower().replace(" ", "") for t in cache_control.split(",")}
    if "no-store" in tokens:
        return False, False
    if "no-cache" in tokens or "max-age=0" in tokens:
        return False, True
    return True, True


def is_complete(events: Sequence[Event]) -> bool:
    """A complete, successful answer: some content, and a final `Finish` worth keeping."""
    finish = next((event for event in reversed(events) if isinstance(event, Finish)), None)
    if finish is None or finish.reason not in _CACHEABLE_FINISH:
        return False
    return any(is_content(event) for event in events)


@dataclass(slots=True)
class _Counters:
    hits: int = 0
    misses: int = 0
    shared: int = 0
    bypasses: int = 0


class ResponseCache:
    """Store + singleflight + counters. `home=None` keeps the cache in memory only.

    `clock` (unix seconds) stamps and expires entries; tests inject a fake one.
    `memory_bytes` bounds the answers held in memory (the disk holds the rest).
    """

    def __init__(
        self,
        config: CacheConfig,
        home: Path | None,
        clock: Clock = time.time,
        *,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
    ) -> None:
        self.config = config
        self.store = _store(config, home, clock, memory_bytes)
        self._flights = SingleFlight(max_buffer_bytes=config.max_entry_bytes)
        self._counters: dict[str, _Counters] = {}

    async def find(self, namespace: str, key: str) -> CacheHop | None:
        """A stored answer (memory, then disk) or an identical call in flight; never starts one.

        The engine asks this before a hop's gates: a cooling provider's cached answer costs
        it nothing, so it is still served.
        """
        if not self.config.enabled:
            return None
        counters = self._count(namespace)
        store = self.store
        answer = store.lookup(namespace, key)
        if answer is None and store.on_disk(namespace, key):
            answer = await store.get(namespace, key)
        if answer is not None:
            return self._replay(namespace, key, answer, counters)
        # (After the disk read, if any: a flight may have started meanwhile.)
        view = self._flights.join(namespace, key)
        if view is None:
            return None
        counters.shared += 1
        return CacheHop("miss", "follower", view)

    def keep_response(self, hop: CacheHop, response: ChatResponse) -> None:
        """Keep a replayed answer's `response` with it (`CachedAnswer.response`): every
        later replay reuses it. Its text counts against the memory budget."""
        answer = hop.answer
        if answer is None or answer.response is not None:
            return
        if self.store.weigh(hop.namespace, hop.key, answer, _response_size(response)):
            answer.response = response

    def lead(
        self,
        namespace: str,
        key: str,
        start: Start,
        lookup: bool = True,
        store: bool = True,
    ) -> CacheHop:
        """Start this hop's upstream call (shared with later identical requests).

        Call it right after `find` found nothing, with no await in between: then no
        identical flight can have started meanwhile, and this one is not a duplicate.
        `lookup=False` (no-cache) never joins another request but still stores a complete
        answer; `store=False` (no-store, `cacheable: false`, Anthropic `cache_control`
        markers on an Anthropic hop) leaves the cache out.
        """
        counters = self._count(namespace)
        if not self.config.enabled or not store:
            counters.bypasses += 1
            return CacheHop("bypass", "direct", start())
        write = partial(self._write, namespace, key)
        view = self._flights.lead(namespace, key, start, write)
        if lookup:
            counters.misses += 1
            return CacheHop("miss", "leader", view)
        counters.bypasses += 1
        return CacheHop("bypass", "leader", view)

    def _replay(
        self, namespace: str, key: str, answer: CachedAnswer, counters: _Counters
    ) -> CacheHop:
        counters.hits += 1
        decoded = answer.decoded
        events = answer.events
        if not decoded:  # its first replay: the events weigh more than their encoding did
            self.store.weigh(namespace, key, answer, EVENT_OVERHEAD * (len(events) - 1))
        return CacheHop("hit", "stored", _Replay(events), events, answer, namespace, key)

    def _write(self, namespace: str, key: str, events: tuple[Event, ...]) -> None:
        if is_complete(events):
            self.store.put(namespace, key, events)

    def _count(self, namespace: str) -> _Counters:
        counters = self._counters.get(namespace)
        if counters is None:
            counters = self._counters[namespace] = _Counters()
        return counters

    # -- management ----------------------------------------------------------------------

    def stats(self, namespace: str | None = None) -> dict[str, Any]:
        """Counters, entries, bytes and in-flight calls: one namespace, or all of them."""
        if namespace is not None:
            return self._namespace_stats(namespace)
        names = set(self._counters) | set(self.store.namespaces())
        names |= set(self._flights.in_flight_by_namespace())
        per = {name: self._namespace_stats(name) for name in sorted(names)}
        total = {
            k: sum(s[k] for s in per.values())
            for k in ("hits", "misses", "shared", "bypasses", "entries", "bytes", "in_flight")
        }
        return {
            **total,
            "hit_rate": _rate(total["hits"], total["misses"] + total["shared"]),
            "enabled": self.config.enabled,
            "persistent": self.store.persistent,
            "store": self.store.kind,
            "namespaces": per,
        }

    def _namespace_stats(self, namespace: str) -> dict[str, Any]:
        c = self._counters.get(namespace, _Counters())
        stored = self.store.stats(namespace)
        return {
            "hits": c.hits,
            "misses": c.misses,
            "shared": c.shared,
            "bypasses": c.bypasses,
            "hit_rate": _rate(c.hits, c.misses + c.shared),
            "entries": stored.entries,
            "bytes": stored.bytes,
            "in_flight": self._flights.in_flight(namespace),
        }

    def reconfigure(self, config: CacheConfig) -> int:
        """A config reload's `RELOADABLE` settings: they apply to the entries held now (see
        `MemoryStore.reconfigure`) and to every flight started from now on; the others
        are kept as they are. Returns how many entries were dropped.
        """
        config = replace(self.config, **{name: getattr(config, name) for name in RELOADABLE})
        if config == self.config:
            return 0
        self.config = config
        self._flights.max_buffer_bytes = config.max_entry_bytes
        return self.store.reconfigure(config)

    def clear(self, namespace: str | None = None) -> int:
        """Drop stored answers here (counters stay); returns how many were dropped."""
        return self.store.clear(namespace)

    async def aclear(self, namespace: str | None = None) -> int:
        """Drop stored answers everywhere: a shared store too (raise CacheUnavailable)."""
        return await self.store.aclear(namespace)

    async def start(self) -> None:
        """At server start: the store's background work (a shared store's writer and poll)."""
        if self.config.enabled:
            await self.store.start()

    async def aclose(self) -> None:
        """Cancel flights still running, then flush pending writes and close the file."""
        await self._flights.aclose()
        await self.store.aclose()


def _store(config: CacheConfig, home: Path | None, clock: Clock, memory_bytes: int) -> Store:
    if not config.enabled:
        return MemoryStore(config, clock, max_total_bytes=memory_bytes)
    if config.redis_url is not None:
        try:
            # Imported only here: the redis package is an extra (`olp[redis]`).
            from olp.cache.redis_store import RedisStore
        except ImportError as exc:
            raise RedisPackageMissing(f"cache.redis_url: {MISSING_REDIS_PACKAGE}") from exc
        return RedisStore(config.redis_url, config, clock, memory_bytes=memory_bytes)
    if home is not None:
        return SqliteStore(home / CACHE_FILE, config, clock, memory_bytes=memory_bytes)
    return MemoryStore(config, clock, max_total_bytes=memory_bytes)


def _response_size(response: ChatResponse) -> int:
    """Roughly the memory a response holds beyond the events it was built from."""
    calls = sum(len(c.id) + len(c.name) + len(c.arguments) for c in response.tool_calls)
    return len(response.text or "") + len(response.reasoning or "") + calls + 256


def _rate(hits: int, others: int) -> float:
    total = hits + others
    return round(hits / total, 4) if total else 0.0


class _Replay:
    """A stored answer as an event iterator, with the original chunk boundaries."""

    __slots__ = ("_events", "_i")

    def __init__(self, events: tuple[Event, ...]) -> None:
        self._events = events
        self._i = 0

    def __aiter__(self) -> _Replay:
        return self

    async def __anext__(self) -> Event:
        i = self._i
        if i >= len(self._events):
            raise StopAsyncIteration
        self._i = i + 1
        return self._events[i]

    async def aclose(self) -> None:
        self._i = len(self._events)
