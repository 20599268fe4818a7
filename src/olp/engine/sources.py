"""Where a hop's events come from: the cache, a shared in-flight call, or the provider.

The engine asks `find_cached` before a hop's gates (a cooling provider's cached answer
costs it nothing) and `start` after them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from olp.cache import CacheHop, CancelGuard, ResponseCache, hop_key
from olp.engine.routing import Hop
from olp.ir import ChatRequest, Event
from olp.providers.base import HopContext

__all__ = ["CacheScope", "HopSource", "find_cached", "start"]


# Not frozen: one is built per request, and a frozen dataclass costs ~3x to build.
@dataclass(slots=True)
class CacheScope:
    """One request's view of the cache (docs/design.md §7)."""

    cache: ResponseCache
    namespace: str  # the caller's key id
    fingerprint: bytes  # request_fingerprint(request), computed once
    lookup: bool  # False: Cache-Control no-cache (or no-store)
    store: bool  # False: Cache-Control no-store
    # Anthropic `cache_control` markers in the request: bypass on Anthropic hops.
    prompt_cache_markers: bool = False
    # The request's disconnect watch: lets a lone leader pull its upstream in its own task.
    guard: CancelGuard | None = None
    # The hop last resolved, and whether its answer is stored and under which key:
    # `find_cached` and `start` both ask, once per hop (work done on every cache miss).
    hop: Hop | None = field(default=None, init=False)
    stores: bool = field(default=False, init=False)
    key: str = field(default="", init=False)

    def resolve(self, hop: Hop) -> bool:
        """Whether `hop`'s answer is stored; sets `stores` and `key` for it."""
        if hop is self.hop:
            return self.stores
        caps = hop.provider.capabilities
        stores = self.store and caps.cacheable
        if self.prompt_cache_markers and caps.prompt_cache_markers:
            stores = False
        self.hop, self.stores = hop, stores
        # (A hop whose answer is not stored never uses its key: no hash for it.)
        self.key = hop_key(hop.name, hop.model, self.fingerprint) if stores else ""
        return stores


# What a hop's events come from, and who pays for them: the cache's own answer type.
HopSource = CacheHop


async def find_cached(hop: Hop, scope: CacheScope | None) -> HopSource | None:
    if scope is None or not scope.lookup or not scope.resolve(hop):
        return None
    return await scope.cache.find(scope.namespace, scope.key)


def start(hop: Hop, request: ChatRequest, request_id: str, scope: CacheScope | None) -> HopSource:
    def call() -> AsyncIterator[Event]:
        ctx = HopContext(request_id=request_id, hop=hop.index)
        return hop.provider.stream(request.with_model(hop.model), ctx)

    if scope is None:
        return CacheHop("bypass", "direct", call())
    stores = scope.resolve(hop)
    # (Positional: this runs on every miss.)
    return scope.cache.lead(scope.namespace, scope.key, call, scope.lookup, stores, scope.guard)
