"""Cooldowns: a provider (or one of its models) is not tried again until a moment passes.

In memory and O(1) per check: the hot path asks `blocking()` for every hop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Clock", "Cooldown", "Cooldowns"]

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Cooldown:
    provider: str
    model: str | None  # None: the whole provider
    until: float  # unix seconds
    reason: str  # the taxonomy code that caused it
    message: str


class Cooldowns:
    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        self._entries: dict[tuple[str, str | None], Cooldown] = {}

    def cool(
        self, provider: str, model: str | None, seconds: float, reason: str, message: str = ""
    ) -> Cooldown:
        """Cool down for `seconds`; a longer existing cooldown is kept, a shorter one extended."""
        until = self._clock() + max(seconds, 0.0)
        key = (provider, model)
        current = self._entries.get(key)
        if current is not None and current.until >= until:
            return current
        entry = Cooldown(provider, model, until, reason, message)
        self._entries[key] = entry
        return entry

    def blocking(self, provider: str, model: str) -> Cooldown | None:
        """The cooldown that keeps this hop from running now, if any."""
        if not self._entries:
            return None
        now = self._clock()
        for key in ((provider, None), (provider, model)):
            entry = self._entries.get(key)
            if entry is not None:
                if entry.until > now:
                    return entry
                del self._entries[key]
        return None

    def reset(self, provider: str) -> int:
        """End every cooldown of `provider`; returns how many ended."""
        keys = [k for k in self._entries if k[0] == provider]
        for key in keys:
            del self._entries[key]
        return len(keys)

    def active(self) -> list[Cooldown]:
        now = self._clock()
        return sorted((c for c in self._entries.values() if c.until > now), key=lambda c: c.until)

    def now(self) -> float:
        return self._clock()
