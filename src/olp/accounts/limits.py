"""Per-key limits, enforced from memory: requests/minute, requests/day, requests in the last
7 and 30 days, tokens/day, USD/month, requests in progress at once.

Windows: requests per minute slide, in one-second buckets (a request counts for the 60
seconds that follow its own second); the daily limits reset at 00:00 UTC; the 7- and
30-day request limits roll by UTC day (a request counts until the end of the 7th or 30th
UTC day, its own day included); the monthly spend resets at 00:00 UTC on the first of the
month. A request in progress holds one of
its key's concurrent slots from `admit` to `release`. Counters live in memory only —
`seed()` lets the ledger reload today's and this month's figures at start, so a restart
does not hand everyone a fresh allowance.

All methods are meant for the event loop's thread; nothing here blocks or does I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from olp.accounts.identity import Identity, KeyLimits
from olp.errors import KeyLimitExceeded

__all__ = ["Clock", "LimitKeeper", "LimitUsage", "UsageSeed"]

Clock = Callable[[], float]

_WINDOW = 60  # seconds in the requests-per-minute window
_DAY = 86_400
_LONGEST_DAYS = 30  # the longest rolling window (rp30d), in UTC days
_BUSY_RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class UsageSeed:
    """What the ledger knows about one key at start (current UTC day and month).

    `recent_requests`: unix times of requests in the last minute, so requests-per-minute
    also holds across a quick restart (older or future times are ignored).
    `earlier_days`: (UTC day number, requests) for the 29 days before today, for the 7- and
    30-day limits (other days are ignored).
    """

    key_id: str
    requests_today: int = 0
    tokens_today: int = 0
    usd_month: float = 0.0
    recent_requests: tuple[float, ...] = ()
    earlier_days: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """One key's counters now (for status pages and tests)."""

    requests_last_minute: int
    requests_today: int
    requests_7d: int
    requests_30d: int
    tokens_today: int
    usd_month: float
    in_progress: int = 0


class _Counters:
    __slots__ = (
        "counts",
        "day",
        "earlier",
        "low",
        "month_end",
        "month_start",
        "requests",
        "seconds",
        "tokens",
        "total",
        "usd",
    )

    def __init__(self) -> None:
        self.seconds = [-1] * _WINDOW  # which second each bucket currently counts
        self.counts = [0] * _WINDOW
        # Running count for the minute window: `total` is the sum of the buckets whose
        # second is >= `low` (the window's oldest second when last asked), kept up to date
        # by add_request and advanced by in_window, so a check costs O(1), not a 60-sum.
        self.low = 0
        self.total = 0
        self.day = -1
        self.requests = 0  # today's
        self.earlier: dict[int, int] = {}  # UTC day -> requests, for the 29 days before today
        self.tokens = 0
        self.month_start = self.month_end = 0.0
        self.usd = 0.0

    def roll(self, now: float) -> None:
        """Start a new day or month when the clock has moved into one."""
        day = int(now // _DAY)
        if day != self.day:
            if self.requests:
                self.earlier[self.day] = self.requests
            self.earlier = {d: n for d, n in self.earlier.items() if day - _LONGEST_DAYS < d < day}
            self.day, self.requests, self.tokens = day, 0, 0
        if not self.month_start <= now < self.month_end:
            self.month_start, self.month_end = _month_bounds(now)
            self.usd = 0.0

    def add_request(self, at: float) -> None:
        second = int(at)
        slot = second % _WINDOW
        if self.seconds[slot] != second:
            if self.seconds[slot] >= self.low:
                self.total -= self.counts[slot]
            self.seconds[slot], self.counts[slot] = second, 0
        self.counts[slot] += 1
        if second >= self.low:
            self.total += 1

    def in_window(self, now: float) -> int:
        oldest = int(now) - _WINDOW + 1
        low = self.low
        if oldest == low:
            return self.total
        if low < oldest <= low + _WINDOW:  # the usual case: a second or a few went by
            seconds, counts = self.seconds, self.counts
            for second in range(low, oldest):
                slot = second % _WINDOW
                if seconds[slot] == second:
                    self.total -= counts[slot]
        else:  # idle for over a minute, or the clock went back: count afresh
            self.total = sum(
                c for s, c in zip(self.seconds, self.counts, strict=True) if s >= oldest
            )
        self.low = oldest
        return self.total

    def in_days(self, days: int) -> int:
        """Requests in the last `days` UTC days, today included."""
        first = self.day - days + 1
        return self.requests + sum(n for d, n in self.earlier.items() if d >= first)

    def recent(self, now: float) -> list[tuple[int, int]]:
        """(second, count) of the buckets still in the window, oldest first."""
        oldest = int(now) - _WINDOW + 1
        return sorted(
            (s, c) for s, c in zip(self.seconds, self.counts, strict=True) if s >= oldest and c
        )


class LimitKeeper:
    """Counts each key's use and refuses a request that would go over one of its limits."""

    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        self._keys: dict[str, _Counters] = {}
        # Requests holding a concurrent slot, by key; a key with none held is not listed.
        self._in_progress: dict[str, int] = {}

    def admit(self, identity: Identity) -> bool:
        """Let a request in and count it, or raise KeyLimitExceeded (429) if any limit is
        reached, naming the one that frees last, with `retry_after` = seconds until every
        reached limit has room again. With a `concurrent` limit the request holds a slot:
        True, and the caller must `release` it when the request ends, however it ends."""
        now = self._clock()
        key_id = identity.key_id
        counters = self._counters(key_id, now)
        limits = identity.limits
        if limits.any():
            self._refuse_if_reached(counters, limits, key_id, now)
        counters.add_request(now)
        counters.requests += 1
        if limits.concurrent is None:
            return False
        self._in_progress[key_id] = self._in_progress.get(key_id, 0) + 1
        return True

    def _refuse_if_reached(
        self, counters: _Counters, limits: KeyLimits, key_id: str, now: float
    ) -> None:
        # (The usual answer, room everywhere, first and cheaply; then what is reached.)
        in_progress = self._in_progress.get(key_id, 0)
        if _has_room(counters, limits, now) and (
            limits.concurrent is None or in_progress < limits.concurrent
        ):
            return
        reached = [
            r
            for r in (
                _rpm(counters, limits, now),
                _rpd(counters, limits, now),
                _rolling(counters, limits.rp7d, 7, now),
                _rolling(counters, limits.rp30d, 30, now),
                _tpd(counters, limits, now),
                _usd(counters, limits, now),
                _busy(in_progress, limits),
            )
            if r is not None
        ]
        if reached:
            retry_after, message = max(reached)
            raise KeyLimitExceeded(message, retry_after=retry_after)

    def release(self, key_id: str) -> None:
        """The end of a request that `admit` gave a concurrent slot."""
        left = self._in_progress.get(key_id, 0) - 1
        if left > 0:
            self._in_progress[key_id] = left
        else:
            self._in_progress.pop(key_id, None)

    def on_usage(self, key_id: str, tokens: int, usd: float) -> None:
        """Add an answer's tokens (prompt + completion) and API-equivalent cost."""
        counters = self._counters(key_id, self._clock())
        counters.tokens += max(0, tokens)
        counters.usd += max(0.0, usd)

    def seed(self, seeds: Iterable[UsageSeed]) -> None:
        """Load counters at start (replacing any kept so far for those keys)."""
        now = self._clock()
        for seed in seeds:
            counters = _Counters()
            counters.roll(now)
            counters.requests = seed.requests_today
            counters.tokens = seed.tokens_today
            counters.usd = seed.usd_month
            counters.earlier = {
                day: count
                for day, count in seed.earlier_days
                if counters.day - _LONGEST_DAYS < day < counters.day and count > 0
            }
            for at in seed.recent_requests:
                if now - _WINDOW < at <= now:
                    counters.add_request(at)
            self._keys[seed.key_id] = counters

    def usage(self, key_id: str) -> LimitUsage:
        now = self._clock()
        counters = self._counters(key_id, now)
        return LimitUsage(
            requests_last_minute=counters.in_window(now),
            requests_today=counters.requests,
            requests_7d=counters.in_days(7),
            requests_30d=counters.in_days(30),
            tokens_today=counters.tokens,
            usd_month=counters.usd,
            in_progress=self._in_progress.get(key_id, 0),
        )

    def _counters(self, key_id: str, now: float) -> _Counters:
        counters = self._keys.get(key_id)
        if counters is None:
            counters = self._keys[key_id] = _Counters()
        counters.roll(now)
        return counters


def _has_room(counters: _Counters, limits: KeyLimits, now: float) -> bool:
    """No limit reached: the usual answer, without a call per limit (as `_rpm`... below)."""
    return (
        (limits.rpm is None or counters.in_window(now) < limits.rpm)
        and (limits.rpd is None or counters.requests < limits.rpd)
        and (limits.rp7d is None or counters.in_days(7) < limits.rp7d)
        and (limits.rp30d is None or counters.in_days(30) < limits.rp30d)
        and (limits.tpd is None or counters.tokens < limits.tpd)
        and (limits.usd_month is None or counters.usd < limits.usd_month)
    )


# Each returns None (room left) or (seconds until there is room, message).
Reached = tuple[float, str] | None


def _rpm(counters: _Counters, limits: KeyLimits, now: float) -> Reached:
    if limits.rpm is None:
        return None
    excess = counters.in_window(now) - limits.rpm + 1
    if excess <= 0:
        return None
    # Room comes back when enough of the oldest requests have left the window.
    wait = float(_WINDOW)
    for second, count in counters.recent(now):
        excess -= count
        if excess <= 0:
            wait = second + _WINDOW - now
            break
    return wait, (
        f"This key is limited to {limits.rpm} requests per minute; try again in {_duration(wait)}."
    )


def _rpd(counters: _Counters, limits: KeyLimits, now: float) -> Reached:
    if limits.rpd is None or counters.requests < limits.rpd:
        return None
    wait = _next_midnight(now) - now
    return wait, (
        f"This key has used its {limits.rpd} requests for today; the limit resets at "
        f"00:00 UTC, in {_duration(wait)}."
    )


def _rolling(counters: _Counters, limit: int | None, days: int, now: float) -> Reached:
    """The 7- or 30-day request limit: room comes back as the oldest days leave the window."""
    if limit is None:
        return None
    excess = counters.in_days(days) - limit + 1
    if excess <= 0:
        return None
    first = counters.day - days + 1
    by_day = sorted((d, n) for d, n in counters.earlier.items() if d >= first)
    by_day.append((counters.day, counters.requests))
    wait = (counters.day + days) * _DAY - now
    for day, count in by_day:
        excess -= count
        if excess <= 0:
            wait = (day + days) * _DAY - now
            break
    return wait, (
        f"This key has used its {limit} requests for the last {days} days; room comes back "
        f"as the oldest of them leave the window, in {_duration(wait)}."
    )


def _tpd(counters: _Counters, limits: KeyLimits, now: float) -> Reached:
    if limits.tpd is None or counters.tokens < limits.tpd:
        return None
    wait = _next_midnight(now) - now
    return wait, (
        f"This key has used {counters.tokens} of its {limits.tpd} tokens for today; "
        f"the limit resets at 00:00 UTC, in {_duration(wait)}."
    )


def _usd(counters: _Counters, limits: KeyLimits, now: float) -> Reached:
    if limits.usd_month is None or counters.usd < limits.usd_month:
        return None
    wait = counters.month_end - now
    reset = datetime.fromtimestamp(counters.month_end, UTC).strftime("%Y-%m-%d")
    return wait, (
        f"This key has used ${counters.usd:.2f} of its ${limits.usd_month:.2f} for this "
        f"month; the limit resets on {reset} 00:00 UTC, in {_duration(wait)}."
    )


def _busy(in_progress: int, limits: KeyLimits) -> Reached:
    if limits.concurrent is None or in_progress < limits.concurrent:
        return None
    # When one of them ends nobody can know; a second is what a client should wait to ask.
    return _BUSY_RETRY_S, (
        f"This key allows {limits.concurrent} request{'s' if limits.concurrent > 1 else ''} "
        f"at a time and {in_progress} {'are' if in_progress > 1 else 'is'} in progress; "
        "retry when one finishes."
    )


def _next_midnight(now: float) -> float:
    return (now // _DAY + 1) * _DAY


def _month_bounds(now: float) -> tuple[float, float]:
    day = datetime.fromtimestamp(now, UTC)
    start = datetime(day.year, day.month, 1, tzinfo=UTC)
    end = datetime(day.year + day.month // 12, day.month % 12 + 1, 1, tzinfo=UTC)
    return start.timestamp(), end.timestamp()


def _duration(seconds: float) -> str:
    whole = max(1, int(seconds + 0.999))
    if whole < 120:
        return f"{whole} s"
    minutes = whole // 60
    if minutes < 120:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} days {hours % 24} h"
