"""What every cache store offers, whatever it keeps its entries in.

Three implementations: `MemoryStore` (a bounded LRU in this process); `SqliteStore`, a
`MemoryStore` whose entries are also in `$OLP_HOME/cache.db` and survive restarts; and
`RedisStore`, a `MemoryStore` in front of a Redis that several replicas share.
Entries live in namespaces (one per OLP key): a namespace never sees another's entries,
and each has its own entry limit and LRU order.

`lookup` is the hot path: memory only, synchronous, microseconds. `get` may also read the
disk (in a worker thread, never on the event loop) or Redis; `on_disk` says whether it
would.
Writes never block the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from olp.cache.codec import decode_events
from olp.config import CacheConfig
from olp.ir import ChatResponse, Event

__all__ = ["CachedAnswer", "Store", "StoreStats"]


class CachedAnswer:
    """One complete answer: the events exactly as the upstream produced them.

    An answer a miss just stored keeps only its encoding (`body`, one bytes object) until
    a replay first asks for `events`: most answers a miss stores are never asked for
    again, and one object instead of one per event takes half the memory of a short
    answer, a fifth of a streamed one of a dozen chunks, and less of the CPU's caches.
    The replay that decodes it counts the difference (`ResponseCache` does, with
    `Store.weigh`). Nobody changes the events once made.
    """

    __slots__ = (
        "_body",
        "_events",
        "created_at",
        "expires_at",
        "nbytes",
        "response",
    )

    def __init__(
        self,
        events: tuple[Event, ...] | None,
        nbytes: int,
        created_at: float,
        expires_at: float,
        body: bytes | None = None,
    ) -> None:
        if events is None and body is None:
            raise ValueError("a cached answer needs its events or their encoding")
        self._events = events
        self._body = None if events is not None else body
        self.nbytes = nbytes  # size of the encoded entry; what `max_entry_bytes` limits
        self.created_at = created_at
        self.expires_at = expires_at
        # The events as one non-streaming response, built by the first replay that needed
        # it: every later one reuses it (the events never change), and it goes with the
        # entry. Set only through `ResponseCache.keep_response`, which counts its size.
        self.response: ChatResponse | None = None

    @property
    def decoded(self) -> bool:
        """Whether `events` is at hand (else the first read decodes `body`)."""
        return self._events is not None

    @property
    def events(self) -> tuple[Event, ...]:
        events = self._events
        if events is None:
            assert self._body is not None
            events = decode_events(self._body)
            if events is None:  # encoded by this process, with this codec: cannot happen
                raise AssertionError("a cached answer's own encoding does not decode")
            self._events, self._body = events, None
        return events


@dataclass(frozen=True, slots=True)
class StoreStats:
    entries: int = 0
    bytes: int = 0


class Store(Protocol):
    def lookup(self, namespace: str, key: str) -> CachedAnswer | None:
        """A live entry held in memory, or None. Never touches the disk."""

    def on_disk(self, namespace: str, key: str) -> bool:
        """An entry exists whose events are not in memory: only `get` can answer it."""

    async def get(self, namespace: str, key: str) -> CachedAnswer | None:
        """A live entry from memory or, on a memory miss, from the disk."""

    def put(self, namespace: str, key: str, events: Sequence[Event]) -> bool:
        """Store an answer; False when it is not kept (over `max_entry_bytes`, `ttl_s` 0)."""

    def weigh(self, namespace: str, key: str, answer: CachedAnswer, nbytes: int) -> bool:
        """Count `nbytes` more in memory for `answer`, if it is still that key's loaded
        answer (the memory budget then unloads others as needed); False if it is not."""

    def delete(self, namespace: str, key: str) -> bool: ...

    def clear(self, namespace: str | None = None) -> int:
        """Drop one namespace's entries, or all; returns how many were dropped."""

    async def aclear(self, namespace: str | None = None) -> int:
        """`clear`, and wait until a shared store has done it too."""

    def reconfigure(self, config: CacheConfig) -> int:
        """New limits (ttl_s, max_entries_per_key, max_entry_bytes) for what is held and
        what comes; returns how many entries they dropped."""

    def stats(self, namespace: str | None = None) -> StoreStats: ...

    def namespaces(self) -> list[str]: ...

    @property
    def persistent(self) -> bool:
        """Answers outlive this process (a file, or Redis)."""

    @property
    def kind(self) -> str:
        """Where answers are kept: memory, sqlite or redis."""

    async def start(self) -> None:
        """Begin background work that needs the event loop (once, at server start)."""

    async def aclose(self) -> None:
        """Flush pending writes and release files."""
