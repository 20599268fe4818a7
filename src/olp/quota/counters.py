"""Per-provider request counters: requests today (UTC) and a rolling 5-hour window."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["FIVE_HOURS", "ProviderCounters", "utc_day"]

FIVE_HOURS = 5 * 3600
_BUCKET_S = 60  # the 5-hour window is kept as per-minute buckets: 300 entries at most


def utc_day(ts: float) -> int:
    return int(ts // 86_400)


@dataclass(slots=True)
class ProviderCounters:
    day: int = 0
    today: int = 0
    # (minute, count) pairs, oldest first.
    buckets: deque[tuple[int, int]] = field(default_factory=deque)

    def add(self, now: float) -> None:
        day = utc_day(now)
        if day != self.day:
            self.day, self.today = day, 0
        self.today += 1
        minute = int(now // _BUCKET_S)
        if self.buckets and self.buckets[-1][0] == minute:
            self.buckets[-1] = (minute, self.buckets[-1][1] + 1)
        else:
            self.buckets.append((minute, 1))
        self._trim(now)

    def requests_today(self, now: float) -> int:
        return self.today if utc_day(now) == self.day else 0

    def five_hour(self, now: float) -> int:
        self._trim(now)
        return sum(count for _, count in self.buckets)

    def window_frees_at(self, now: float, below: float) -> float | None:
        """When the 5-hour count drops under `below` as its oldest minutes age out.

        None when it is under already, or never will be (`below` <= 0).
        """
        self._trim(now)
        count = sum(n for _, n in self.buckets)
        if count < below:
            return None
        for minute, n in self.buckets:
            count -= n
            if count < below:
                return float(minute * _BUCKET_S + FIVE_HOURS)  # when `_trim` drops it
        return None

    def _trim(self, now: float) -> None:
        oldest = int((now - FIVE_HOURS) // _BUCKET_S)
        while self.buckets and self.buckets[0][0] <= oldest:
            self.buckets.popleft()

    def to_json(self) -> dict[str, object]:
        return {"day": self.day, "today": self.today, "buckets": list(self.buckets)}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ProviderCounters:
        raw = data.get("buckets")
        buckets = deque((int(m), int(c)) for m, c in (raw if isinstance(raw, list) else []))
        day, today = data.get("day"), data.get("today")
        return cls(
            day=day if isinstance(day, int) else 0,
            today=today if isinstance(today, int) else 0,
            buckets=buckets,
        )
