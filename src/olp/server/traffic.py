"""Requests per minute over the last 24 hours, by provider and by status, in memory.

One small dict per minute that saw traffic ({(provider, status): count}); a new minute
drops the ones older than a day, so memory stays bounded however long OLP runs. Figures
start at OLP's start: the ledger, not this, is the record that survives restarts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KEEP_MINUTES", "Traffic"]

KEEP_MINUTES = 24 * 60

_Bucket = dict[tuple[str, int], int]


class Traffic:
    __slots__ = ("_bucket", "_current", "_minutes")

    def __init__(self) -> None:
        self._minutes: dict[int, _Bucket] = {}
        self._current = -1
        self._bucket: _Bucket = {}

    def add(self, now: float, provider: str, status: int) -> None:
        minute = int(now // 60)
        if minute != self._current:
            self._enter(minute)
        key = (provider, status)
        self._bucket[key] = self._bucket.get(key, 0) + 1

    def _enter(self, minute: int) -> None:
        # A bucket may already exist: the wall clock can step back.
        bucket = self._minutes.get(minute)
        if bucket is None:
            bucket = self._minutes[minute] = {}
            oldest = minute - KEEP_MINUTES
            for old in [m for m in self._minutes if m <= oldest]:
                del self._minutes[old]
        self._current, self._bucket = minute, bucket

    def report(self, now: float) -> dict[str, Any]:
        """The last hour minute by minute and the last 24 hours hour by hour, ending now."""
        minute = int(now // 60)
        hour = _series(self._minutes, minute - 59, 60, 1)
        day = _series(self._minutes, minute - KEEP_MINUTES + 1, 24, 60)
        return {
            "last_hour": hour,
            "last_24h": day,
            # The last complete minute: the current one is still filling up.
            "requests_last_minute": hour["total"][-2],
            "requests_per_minute_1h": round(sum(hour["total"]) / 60, 2),
        }


def _series(minutes: dict[int, _Bucket], first: int, bins: int, width: int) -> dict[str, Any]:
    """`bins` bins of `width` minutes from minute `first`: totals, by provider, by status."""
    total = [0] * bins
    by_provider: dict[str, list[int]] = {}
    by_status: dict[str, list[int]] = {}
    errors = 0
    for minute, bucket in minutes.items():
        index = (minute - first) // width
        if not 0 <= index < bins:
            continue
        for (provider, status), count in bucket.items():
            total[index] += count
            by_provider.setdefault(provider, [0] * bins)[index] += count
            by_status.setdefault(str(status), [0] * bins)[index] += count
            errors += count if status >= 400 else 0
    return {
        "start": first * 60,
        "step_s": width * 60,
        "total": total,
        "requests": sum(total),
        "errors": errors,
        "by_provider": dict(sorted(by_provider.items())),
        "by_status": dict(sorted(by_status.items())),
    }
