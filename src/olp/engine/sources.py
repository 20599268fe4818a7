"""Where a hop's events come from: a stored answer, a shared in-flight call, or the provider.

The engine asks `find_cached` before a hop's gates (a cooling provider's cached answer
costs it nothing) and `start` after them. With the cache off, or bypassed for a hop, the
source is the provider's own stream (`DirectSource`); with it on, the cache's answer
(`olp.cache.CacheHop`) is one, through the `HopCache` protocol below.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from olp.cache import hop_key
from olp.engine.routing import Hop
from olp.ir import ChatRequest, Event
from olp.providers.base import HopContext

__all__ = ["CacheScope", "DirectSource", "HopCache", "HopSource", "find_cached", "start"]


class HopSource(Protocol):
    """One hop's events, and who pays for them."""

    @property
    def outcome(self) -> str:
        """What `X-OLP-Cache` says: "hit", "miss" or "bypass"."""

    @property
    def role(self) -> str:
        """ "stored" (a stored answer), "leader" (this request's own upstream call, maybe
        shared), "follower" (another request's call) or "direct" (no cache involved)."""

    @property
    def events(self) -> AsyncIterator[Event]:
        """Iterate it, and always aclose() it."""

    @property
    def stored(self) -> tuple[Event, ...] | None:
        """A stored answer, whole and in hand: nothing to wait for."""

    @property
    def upstream(self) -> bool:
        """This request's own call reached the provider (not a replay, not shared)."""


class HopCache(Protocol):
    """A cache of hop answers, with singleflight: what `olp.cache.ResponseCache` offers."""

    async def find(self, namespace: str, key: str) -> HopSource | None:
        """A stored answer or an identical call in flight; never starts one."""

    def lead(
        self,
        namespace: str,
        key: str,
        start: Callable[[], AsyncIterator[Event]],
        *,
        lookup: bool,
        store: bool,
    ) -> HopSource:
        """This hop's upstream call (`start()`), shared with later identical requests."""


@dataclass(slots=True)
class DirectSource:
    """The provider's own stream, with no cache involved."""

    events: AsyncIterator[Event]
    outcome: str = "bypass"
    role: str = "direct"
    stored: tuple[Event, ...] | None = None
    upstream: bool = True


@dataclass(slots=True)
class CacheScope:
    """One request's view of the cache (docs/design.md §7)."""

    cache: HopCache
    namespace: str  # the caller's key id
    fingerprint: bytes  # request_fingerprint(request), computed once
    lookup: bool  # False: Cache-Control no-cache (or no-store)
    store: bool  # False: Cache-Control no-store
    # Anthropic `cache_control` markers in the request: bypass on Anthropic hops.
    prompt_cache_markers: bool = False
    # The hop last resolved, and whether its answer is stored and under which key:
    # `find_cached` and `start` both ask for the same hop.
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
        self.key = hop_key(hop.name, hop.model, self.fingerprint) if stores else ""
        return stores


async def find_cached(hop: Hop, scope: CacheScope | None) -> HopSource | None:
    if scope is None or not scope.lookup or not scope.resolve(hop):
        return None
    return await scope.cache.find(scope.namespace, scope.key)


def start(hop: Hop, request: ChatRequest, request_id: str, scope: CacheScope | None) -> HopSource:
    def call() -> AsyncIterator[Event]:
        ctx = HopContext(request_id=request_id, hop=hop.index)
        return hop.provider.stream(request.with_model(hop.model), ctx)

    if scope is None:
        return DirectSource(call())
    stores = scope.resolve(hop)
    return scope.cache.lead(scope.namespace, scope.key, call, lookup=scope.lookup, store=stores)
