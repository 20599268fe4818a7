"""Routing, the trigger table and the fallback engine."""

from __future__ import annotations

from olp.engine.classify import Decision, decide
from olp.engine.fallback import Attempt, AttemptListener, FallbackEngine, HopGate, Served
from olp.engine.pools import MemberState, PoolScheduler
from olp.engine.routing import Chain, Hop, Router
from olp.engine.sources import CacheScope, DirectSource, HopCache, HopSource

__all__ = [
    "Attempt",
    "AttemptListener",
    "CacheScope",
    "Chain",
    "Decision",
    "DirectSource",
    "FallbackEngine",
    "Hop",
    "HopCache",
    "HopGate",
    "HopSource",
    "MemberState",
    "PoolScheduler",
    "Router",
    "Served",
    "decide",
]
