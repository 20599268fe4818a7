"""In-memory request metrics: what `/metrics`, the status endpoint and the dashboard read.

Fed by one observer per finished chat request (`observe`) and one engine listener per hop
(`on_attempt`). Each update is a handful of dict/list operations on the event loop's
thread: no I/O, no lock, no allocation that grows with traffic (label sets are capped,
rings and minute buckets are bounded). Everything derived — percentiles, sums, the
exposition text — is computed only when someone asks.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable

from olp.engine import Attempt
from olp.ir import Usage
from olp.server.outcome import RequestOutcome
from olp.server.recent import RecentEvents
from olp.server.traffic import Traffic

__all__ = ["LATENCY_BUCKETS_S", "MAX_SERIES", "Histogram", "Metrics", "SavedByCache"]

# Seconds. CLI providers answer in tens of seconds, HTTP ones in milliseconds: both ends.
LATENCY_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
# A client can name models freely (`provider/anything`): past this many label sets a new
# model is counted as "other", so a stream of made-up names cannot grow memory.
MAX_SERIES = 2000
_P50_WINDOW = 256  # latencies kept per provider for the dashboard's medians


class Histogram:
    """A Prometheus histogram per label set: bucket counts (not cumulative), sum, count."""

    __slots__ = ("bounds", "series")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        # label values -> [count per bucket..., +Inf bucket], then the sum kept apart.
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        entry = self.series.get(labels)
        if entry is None:
            entry = self.series[labels] = ([0] * (len(self.bounds) + 1), [0.0])
        entry[0][bisect_left(self.bounds, value)] += 1
        entry[1][0] += value


class SavedByCache:
    """Tokens (and provider-reported cost) of answers served without an upstream call.

    Priced only when the dashboard asks, with the same price table as the ledger. Counted
    in plain ints: every cache hit adds here, and building a frozen `Usage` per hit cost
    more than the rest of this update.
    """

    __slots__ = (
        "cache_write_tokens",
        "cached_prompt_tokens",
        "completion_tokens",
        "cost_usd",
        "prompt_tokens",
        "reasoning_tokens",
        "requests",
    )

    def __init__(self) -> None:
        self.requests = 0
        self.prompt_tokens = self.completion_tokens = self.cached_prompt_tokens = 0
        self.cache_write_tokens = self.reasoning_tokens = 0
        self.cost_usd: float | None = 0.0  # None once an answer came without its own cost

    def add(self, usage: Usage | None) -> None:
        self.requests += 1
        if usage is None:
            return
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.cached_prompt_tokens += usage.cached_prompt_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.reasoning_tokens += usage.reasoning_tokens
        if self.cost_usd is not None and usage.cost_usd is not None:
            self.cost_usd += usage.cost_usd
        else:
            self.cost_usd = None

    @property
    def usage(self) -> Usage:
        """The tokens so far, as one `Usage`."""
        return Usage(
            self.prompt_tokens,
            self.completion_tokens,
            self.cached_prompt_tokens,
            self.cache_write_tokens,
            self.reasoning_tokens,
        )


class Metrics:
    """Counters since start. The event loop's thread only (no locking needed)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        # (provider, model, status, cache) -> requests
        self.requests: dict[tuple[str, str, str, str], int] = {}
        self.latency = Histogram(LATENCY_BUCKETS_S)  # by provider, seconds
        self.ttft = Histogram(LATENCY_BUCKETS_S)  # by provider, seconds
        # (provider, outcome, code) -> hop attempts, from the engine
        self.hops: dict[tuple[str, str, str], int] = {}
        self.errors: dict[str, int] = {}  # error code -> requests answered with it
        self.fallbacks = 0  # requests where at least one hop failed or was skipped
        self.fallback_saves: dict[str, int] = {}  # provider that answered after a failed hop
        self.saved: dict[tuple[str, str], SavedByCache] = {}  # (provider, model)
        self.active_requests = 0
        self.active_streams = 0
        self.traffic = Traffic()
        self.recent = RecentEvents()
        self._p50: dict[str, tuple[deque[float], deque[float]]] = {}

    # -- updates (hot path) ----------------------------------------------------------

    def observe(self, o: RequestOutcome) -> None:
        """The `OutcomeObserver`: one finished chat request."""
        now = self.clock()
        provider = o.provider
        status = str(o.status)
        key = (provider, o.model if provider != "none" else "none", status, o.cache)
        count = self.requests.get(key)
        if count is None and len(self.requests) >= MAX_SERIES:
            key = (provider, "other", status, o.cache)
            count = self.requests.get(key)
        self.requests[key] = (count or 0) + 1
        self.latency.observe((provider,), o.latency_ms / 1000)
        rings = self._p50.get(provider)
        if rings is None:
            rings = self._p50[provider] = (deque(maxlen=_P50_WINDOW), deque(maxlen=_P50_WINDOW))
        if o.status < 400:
            rings[0].append(o.latency_ms)
        if o.ttft_ms is not None:
            self.ttft.observe((provider,), o.ttft_ms / 1000)
            rings[1].append(o.ttft_ms)
        if o.error_code is not None:
            self.errors[o.error_code] = self.errors.get(o.error_code, 0) + 1
        if o.failures:
            self.fallbacks += 1
            if o.status < 400:
                self.fallback_saves[provider] = self.fallback_saves.get(provider, 0) + 1
        if (o.cache == "hit" or o.shared) and o.status < 400:
            self._saved(provider, o.model).add(o.usage)
        self.traffic.add(now, provider, o.status)
        self.recent.add(now, o)

    def on_attempt(self, a: Attempt) -> None:
        """The engine's `AttemptListener`: one hop served, failed, was skipped or truncated."""
        key = (a.provider, a.outcome, a.failure.value if a.failure is not None else "")
        self.hops[key] = self.hops.get(key, 0) + 1

    def request_started(self) -> None:
        self.active_requests += 1

    def request_ended(self) -> None:
        self.active_requests = max(0, self.active_requests - 1)

    def stream_started(self) -> None:
        self.active_streams += 1

    def stream_ended(self) -> None:
        self.active_streams = max(0, self.active_streams - 1)

    def _saved(self, provider: str, model: str) -> SavedByCache:
        key = (provider, model)
        saved = self.saved.get(key)
        if saved is None:
            saved = self.saved[key] = SavedByCache()
        return saved

    # -- reads (when asked) ----------------------------------------------------------

    def total_requests(self) -> int:
        return sum(self.requests.values())

    def total_errors(self) -> int:
        return sum(n for (_, _, status, _), n in self.requests.items() if int(status) >= 400)

    def cache_outcomes(self) -> dict[str, int]:
        counts = {"hit": 0, "miss": 0, "bypass": 0}
        for (_, _, _, cache), n in self.requests.items():
            counts[cache] = counts.get(cache, 0) + n
        return counts

    def by_provider(self, provider: str) -> tuple[int, int]:
        """(requests, errors) answered as this provider since start."""
        requests = errors = 0
        for (p, _, status, _), n in self.requests.items():
            if p == provider:
                requests += n
                errors += n if int(status) >= 400 else 0
        return requests, errors

    def p50_ms(self, provider: str) -> tuple[float | None, float | None]:
        """Median latency of successful answers and median time to first token, recent."""
        rings = self._p50.get(provider)
        if rings is None:
            return None, None
        return _median(rings[0]), _median(rings[1])


def _median(values: deque[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return round(ordered[mid], 2)
    return round((ordered[mid - 1] + ordered[mid]) / 2, 2)
