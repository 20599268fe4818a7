"""When does a quota come back? Reset times from the texts CLIs print (pure).

CLIs word their usage-limit messages many ways (tests/fixtures/cli/README.md §1.9, §6):
`You've hit your session limit · resets 6:33pm (UTC)`, `… resets Dec 3, 6:33pm (UTC)`,
`5-hour limit reached ∙ resets 9pm`, `Your limit will reset at 3pm (America/Bogota).`,
`Claude AI usage limit reached|1750708800`, `try again in 2h 5m`. Wall-clock times are in
the zone named in brackets, else in the CLI's zone — OLP runs CLIs with TZ=UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["MAX_WAIT_S", "parse_reset", "plausible_reset"]

# A reset further away than this is no hint but garbage ("in 99999999999999d", "inf"):
# it is ignored, as if none were given (the provider's own default wait applies).
MAX_WAIT_S = 400 * 86400.0

_EPOCH = re.compile(r"\|\s*(\d{9,11})\b")
_CLOCK = re.compile(
    r"(?:resets?|try again)(?:\s+(?:at|on))?\s+"
    r"(?:(?P<mon>[A-Za-z]{3,9})\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(?P<year>\d{4}),?\s+)?)?"
    r"(?:at\s+)?(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)?"
    r"(?:\s*\((?P<tz>[^)]{1,64})\))?",
    re.IGNORECASE,
)
_IN = re.compile(
    r"(?:resets?|try again)\s+in\s+"
    r"(?:(?P<d>\d+)\s*d(?:ays?)?\s*)?(?:(?P<h>\d+)\s*h(?:ours?|rs?)?\s*)?"
    r"(?:(?P<m>\d+)\s*m(?:in(?:utes?)?)?\b)?",
    re.IGNORECASE,
)
_MONTHS = {
    name: i + 1
    for i, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    )
}


def plausible_reset(reset_at: float, now: float) -> float | None:
    """`reset_at` if it could be a real reset time: after 1970 and within MAX_WAIT_S."""
    return reset_at if 0 <= reset_at <= now + MAX_WAIT_S else None


def parse_reset(text: str, now: float) -> float | None:
    """The unix time `text` says the limit resets at, or None if it names none (or garbage)."""
    at = _parse(text, now)
    return None if at is None else plausible_reset(at, now)


def _parse(text: str, now: float) -> float | None:
    if m := _EPOCH.search(text):
        return float(m.group(1))
    if (m := _IN.search(text)) and any(m.group(k) for k in ("d", "h", "m")):
        days, hours, minutes = (int(m.group(k) or 0) for k in ("d", "h", "m"))
        return now + days * 86400 + hours * 3600 + minutes * 60
    for m in _CLOCK.finditer(text):
        at = _clock_time(m, now)
        if at is not None:
            return at
    return None


def _clock_time(m: re.Match[str], now: float) -> float | None:
    hour = int(m.group("h"))
    minute = int(m.group("m") or 0)
    ampm = (m.group("ampm") or "").lower().replace(".", "")
    if not m.group("m") and not ampm:
        return None  # a bare number ("resets 3") is not a time
    if ampm:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    if hour > 23 or minute > 59:
        return None
    zone = _zone(m.group("tz"))
    local_now = datetime.fromtimestamp(now, zone)
    if m.group("mon"):
        month = _MONTHS.get(m.group("mon")[:3].lower())
        if month is None:
            return None
        year = int(m.group("year") or local_now.year)
        try:
            at = datetime(year, month, int(m.group("day")), hour, minute, tzinfo=zone)
        except ValueError:
            return None
        if not m.group("year") and at < local_now - timedelta(days=1):
            at = at.replace(year=year + 1)  # "Jan 2" seen on Dec 30
        return at.timestamp()
    at = local_now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if at <= local_now:
        at += timedelta(days=1)
    return at.timestamp()


def _zone(name: str | None) -> tzinfo:
    if not name or name.strip().upper() in ("UTC", "GMT", "Z"):
        return UTC
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        return UTC
