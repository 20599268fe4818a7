"""Content-addressed response cache with per-key namespaces and streaming singleflight.

The engine uses `ResponseCache.find` and `ResponseCache.lead` per hop, with a key from
`cache_key` (or `request_fingerprint` once per request + `hop_key` per hop) and the
(lookup, store) flags from `cache_policy` and the provider's `cacheable`. See
docs/cache.md.
"""

from __future__ import annotations

from olp.cache.facade import (
    CACHE_FILE,
    RELOADABLE,
    CacheHop,
    CacheOutcome,
    HopRole,
    ResponseCache,
    cache_policy,
    is_complete,
)
from olp.cache.keys import cache_key, hop_key, request_fingerprint
from olp.cache.memory import MemoryStore
from olp.cache.singleflight import FlightView, SingleFlight, Start
from olp.cache.sqlite_store import SqliteStore
from olp.cache.store import CachedAnswer, Store, StoreStats

__all__ = [
    "CACHE_FILE",
    "RELOADABLE",
    "CacheHop",
    "CacheOutcome",
    "CachedAnswer",
    "FlightView",
    "HopRole",
    "MemoryStore",
    "ResponseCache",
    "SingleFlight",
    "SqliteStore",
    "Start",
    "Store",
    "StoreStats",
    "cache_key",
    "cache_policy",
    "hop_key",
    "is_complete",
    "request_fingerprint",
]
