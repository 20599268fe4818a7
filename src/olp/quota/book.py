"""What OLP knows about each provider's quota, and the soft triggers that act on it.

The book keeps, per provider: request counters, the latest quota signal the provider
reported (headers, CLI events), and its cooldowns. Soft triggers (docs/quota.md) are
evaluated before a hop runs: one that fires skips the hop without a request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from olp.errors import Failure, ProviderError
from olp.providers.base import QuotaSnapshot
from olp.quota.cooldowns import Clock, Cooldown, Cooldowns
from olp.quota.counters import ProviderCounters, utc_day

__all__ = ["Figure", "ProviderQuota", "QuotaBook", "State", "Window"]

State = Literal["ok", "soft_limited", "cooling_down", "unknown"]
SnapshotSource = Callable[[str], QuotaSnapshot | None]


@dataclass(frozen=True, slots=True)
class Figure:
    """A number and where it came from, so the owner can judge it."""

    value: float | None
    source: str  # "signal", "counter", "counter/capacity", "none"


@dataclass(frozen=True, slots=True)
class Window:
    """A provider's current usage window as its own latest quota signal describes it:
    how much of it is used (None: the signal did not say) and when it resets."""

    utilisation: float | None
    reset_at: float
    source: str
    seen_at: float | None


@dataclass(frozen=True, slots=True)
class ProviderQuota:
    provider: str
    state: State
    requests_today: int
    five_hour_requests: int
    five_hour_utilisation: Figure
    credit_pool_utilisation: Figure
    reset_at: float | None
    signal_seen_at: float | None
    cooldowns: tuple[Cooldown, ...]
    thresholds: Mapping[str, float]
    fired: tuple[str, ...]  # soft triggers that would fire now


@dataclass(frozen=True, slots=True)
class _Fired:
    """A soft trigger that fires now, and when it stops by itself (None: not known)."""

    message: str
    clears_at: float | None


@dataclass(slots=True)
class _Entry:
    counters: ProviderCounters = field(default_factory=ProviderCounters)
    signal: QuotaSnapshot | None = None
    signal_seen_at: float | None = None


class QuotaBook:
    def __init__(
        self,
        cooldowns: Cooldowns,
        thresholds: Mapping[str, Mapping[str, float]],
        snapshots: SnapshotSource,
        clock: Clock = time.time,
    ) -> None:
        self.cooldowns = cooldowns
        self.thresholds = thresholds
        self._snapshots = snapshots
        self._clock = clock
        self._entries: dict[str, _Entry] = {}

    def _entry(self, provider: str) -> _Entry:
        entry = self._entries.get(provider)
        if entry is None:
            entry = self._entries[provider] = _Entry()
        return entry

    # -- updates (hot path: memory only) --------------------------------------------

    def on_attempt(self, provider: str, *, reached: bool) -> None:
        """A hop ran (`reached`: a request really went to the provider) or was skipped."""
        if not reached:
            return
        self._entry(provider).counters.add(self._clock())
        if provider in self.thresholds:
            self.refresh(provider)

    def refresh(self, provider: str) -> None:
        """Take the provider's latest quota signal (parsing it is not free: only when needed)."""
        signal = self._snapshots(provider)
        if signal is not None:
            entry = self._entry(provider)
            entry.signal, entry.signal_seen_at = signal, self._clock()

    # -- soft triggers -----------------------------------------------------------------

    def soft_gate(self, provider: str) -> ProviderError | None:
        """The SOFT_TRIGGER error that skips this provider now, or None.

        Its `reset_at` is when the triggers that fire stop by themselves, so a client
        whose chain is exhausted is told to come back then, not in 30 seconds.
        """
        limits = self.thresholds.get(provider)
        if not limits:
            return None
        fired = self._fired(provider, limits)
        if not fired:
            return None
        return ProviderError(
            Failure.SOFT_TRIGGER,
            f"soft trigger: {fired[0].message}",
            provider=provider,
            reset_at=_clears_at(fired),
        )

    def _fired(self, provider: str, limits: Mapping[str, float]) -> list[_Fired]:
        now = self._clock()
        entry = self._entry(provider)
        fired: list[_Fired] = []
        daily = limits.get("daily_request_count_threshold")
        today = entry.counters.requests_today(now)
        if daily is not None and today >= daily:
            message = f"{today} requests today ≥ daily_request_count_threshold {daily:g}"
            fired.append(_Fired(message, (utc_day(now) + 1) * 86_400.0))  # UTC midnight
        five = limits.get("five_hour_window_percent_threshold")
        if five is not None:
            figure = self._five_hour(provider, entry, now)
            if figure.value is not None and figure.value * 100 >= five:
                message = (
                    f"5-hour window {figure.value:.0%} used ({figure.source}) "
                    f"≥ five_hour_window_percent_threshold {five:g}%"
                )
                fired.append(_Fired(message, self._five_hour_clears(provider, entry, now, five)))
        credit = limits.get("credit_pool_percent_threshold")
        if credit is not None:
            pool = self._credit(entry)
            if pool.value is not None and pool.value * 100 >= credit:
                message = (
                    f"credit pool {pool.value:.0%} used ≥ credit_pool_percent_threshold {credit:g}%"
                )
                fired.append(_Fired(message, self._reset_at(provider)))
        return fired

    def _five_hour_clears(
        self, provider: str, entry: _Entry, now: float, percent: float
    ) -> float | None:
        signal = entry.signal
        if signal is not None and signal.five_hour_utilisation is not None:
            return signal.five_hour_reset_at or signal.reset_at  # the provider's own word
        capacity = self.thresholds.get(provider, {}).get("five_hour_capacity") or 0
        return entry.counters.window_frees_at(now, percent / 100 * capacity)

    def _five_hour(self, provider: str, entry: _Entry, now: float) -> Figure:
        if entry.signal is not None and entry.signal.five_hour_utilisation is not None:
            return Figure(entry.signal.five_hour_utilisation, "signal")
        capacity = self.thresholds.get(provider, {}).get("five_hour_capacity")
        if capacity:
            return Figure(entry.counters.five_hour(now) / capacity, "counter/capacity")
        return Figure(None, "none")

    def _credit(self, entry: _Entry) -> Figure:
        if entry.signal is not None and entry.signal.credit_pool_utilisation is not None:
            return Figure(entry.signal.credit_pool_utilisation, "signal")
        return Figure(None, "none")

    def _reset_at(self, provider: str) -> float | None:
        entry = self._entry(provider)
        return entry.signal.reset_at if entry.signal is not None else None

    # -- windows (pools schedule by them) ----------------------------------------------

    def window(self, provider: str) -> Window | None:
        """The provider's current window, from its latest quota signal; None when no
        signal named a reset still ahead (never asked, or the window has reset since)."""
        self.refresh(provider)
        entry = self._entry(provider)
        signal = entry.signal
        if signal is None:
            return None
        reset = signal.five_hour_reset_at or signal.reset_at
        if reset is None or reset <= self._clock():
            return None
        used = signal.five_hour_utilisation
        if used is None:
            used = signal.utilisation
        return Window(used, reset, signal.source, entry.signal_seen_at)

    def heard_from(self, provider: str) -> bool:
        """Whether OLP knows anything of the provider's use: a quota signal, or a request
        of its own in the last five hours."""
        entry = self._entry(provider)
        return entry.signal is not None or entry.counters.five_hour(self._clock()) > 0

    def blocked(self, provider: str) -> bool:
        """Cooling down (any model) or held back by a soft trigger: the gates skip it."""
        if any(c.provider == provider for c in self.cooldowns.active()):
            return True
        return self.soft_gate(provider) is not None

    # -- reports -----------------------------------------------------------------------

    def status(self, provider: str) -> ProviderQuota:
        self.refresh(provider)
        now = self._clock()
        entry = self._entry(provider)
        cooling = tuple(c for c in self.cooldowns.active() if c.provider == provider)
        limits = self.thresholds.get(provider, {})
        fired = self._fired(provider, limits) if limits else []
        state: State
        reset = self._reset_at(provider)
        if cooling:
            state, reset = "cooling_down", max(c.until for c in cooling)
        elif fired:
            state, reset = "soft_limited", _clears_at(fired) or reset
        elif (
            entry.signal is None
            and entry.counters.requests_today(now) == 0
            and (entry.counters.five_hour(now) == 0)
        ):
            state = "unknown"
        else:
            state = "ok"
        return ProviderQuota(
            provider=provider,
            state=state,
            requests_today=entry.counters.requests_today(now),
            five_hour_requests=entry.counters.five_hour(now),
            five_hour_utilisation=self._five_hour(provider, entry, now),
            credit_pool_utilisation=self._credit(entry),
            reset_at=reset,
            signal_seen_at=entry.signal_seen_at,
            cooldowns=cooling,
            thresholds=limits,
            fired=tuple(f.message for f in fired),
        )

    def statuses(self, providers: Iterable[str]) -> list[ProviderQuota]:
        return [self.status(p) for p in providers]

    # -- persistence -------------------------------------------------------------------

    def dump(self) -> dict[str, dict[str, Any]]:
        """JSON-able state per provider (counters, last signal, cooldowns)."""
        state: dict[str, dict[str, Any]] = {}
        cooling: dict[str, list[dict[str, Any]]] = {}
        for c in self.cooldowns.active():
            cooling.setdefault(c.provider, []).append(
                {"model": c.model, "until": c.until, "reason": c.reason, "message": c.message}
            )
        for provider in sorted(set(self._entries) | set(cooling)):
            self.refresh(provider)
            entry = self._entry(provider)
            state[provider] = {
                "counters": entry.counters.to_json(),
                "signal": _signal_json(entry.signal),
                "signal_seen_at": entry.signal_seen_at,
                "cooldowns": cooling.get(provider, []),
            }
        return state

    def load(self, state: Mapping[str, Mapping[str, Any]]) -> None:
        now = self._clock()
        for provider, data in state.items():
            entry = self._entry(provider)
            counters = data.get("counters")
            if isinstance(counters, dict):
                entry.counters = ProviderCounters.from_json(counters)
            entry.signal = _signal_from(data.get("signal"))
            seen = data.get("signal_seen_at")
            entry.signal_seen_at = float(seen) if isinstance(seen, int | float) else None
            for c in data.get("cooldowns") or []:
                until = float(c.get("until", 0))
                if until > now:
                    self.cooldowns.cool(
                        provider,
                        c.get("model"),
                        until - now,
                        str(c.get("reason", "")),
                        str(c.get("message", "")),
                    )


_SIGNAL_FIELDS = (
    "utilisation",
    "reset_at",
    "remaining_requests",
    "remaining_tokens",
    "five_hour_utilisation",
    "five_hour_reset_at",
    "credit_pool_utilisation",
    "source",
)


def _signal_json(signal: QuotaSnapshot | None) -> dict[str, Any] | None:
    if signal is None:
        return None
    return {name: getattr(signal, name) for name in _SIGNAL_FIELDS}


def _signal_from(data: object) -> QuotaSnapshot | None:
    if not isinstance(data, dict):
        return None
    known = {k: v for k, v in data.items() if k in _SIGNAL_FIELDS}
    try:
        return replace(QuotaSnapshot(), **known)
    except TypeError:
        return None


def _clears_at(fired: list[_Fired]) -> float | None:
    """When every trigger that fires has stopped; the known part if some cannot say."""
    return max((f.clears_at for f in fired if f.clears_at is not None), default=None)
