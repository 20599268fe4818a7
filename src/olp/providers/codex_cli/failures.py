"""Codex errors → the trigger taxonomy (DESIGN §5). Pure: no I/O.

Structured first: app-server's `codexErrorInfo` (`usageLimitExceeded`,
`{"httpConnectionFailed": {"httpStatusCode": 401}}`,
`{"responseTooManyFailedAttempts": {"httpStatusCode": 429}}`, `internalServerError`, …);
then the text, which is all `exec` and older versions give ("You've hit your usage
limit … try again at 4:37 PM", "exceeded retry limit, last status: 429 …",
"unexpected status 503 Service Unavailable: …").

Reset times: Codex renders "try again at 4:37 PM" in the child's zone, and OLP runs every
child with TZ=UTC, so a bare time is the next such UTC wall-clock time.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from olp.errors import Failure, ProviderError

__all__ = [
    "classify",
    "is_connection_retry",
    "is_usage_limit",
    "parse_reset_at",
    "status_failure",
]

_USAGE_LIMIT = re.compile(
    r"hit your usage limit|usage limit (?:has been )?reached|usage_limit_reached"
    r"|out of codex messages|usage limit exceeded",
    re.IGNORECASE,
)
_STATUS_IN_TEXT = re.compile(r"(?:last status|unexpected status)[:\s]+(\d{3})\b", re.IGNORECASE)
_IN_DURATION = re.compile(
    r"try again in\s+((?:\d+\s*(?:days?|hours?|hrs?|minutes?|mins?|seconds?|secs?)[\s,and]*)+)",
    re.IGNORECASE,
)
_DURATION_PART = re.compile(r"(\d+)\s*(d|h|m|s)", re.IGNORECASE)
_AT_TIME = re.compile(
    r"try again at\s+(?:(?P<mon>[A-Z][a-z]{2})[a-z]*\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+"
    r"(?:(?P<year>\d{4}),?\s+)?)?(?P<h>\d{1,2}):(?P<m>\d{2})\s*(?P<ampm>[AP]M)?",
    re.IGNORECASE,
)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# Text of errors that mean "the connection itself failed" (codex then waits for the
# network forever, retries off or not).
_CONNECTION = re.compile(
    r"waiting for network|connection failed|error sending request|connection refused",
    re.IGNORECASE,
)
_IDLE = re.compile(r"idle timeout|timed out", re.IGNORECASE)
_DISCONNECTED = re.compile(r"stream disconnected|connection reset|broken pipe", re.IGNORECASE)

# `codexErrorInfo` strings that carry their meaning without a status.
_INFO_FAILURE = {
    "usageLimitExceeded": Failure.QUOTA_EXHAUSTED,
    "internalServerError": Failure.UPSTREAM_ERROR,
    "serverOverloaded": Failure.OVERLOADED,
    "unauthorized": Failure.AUTH_FAILED,
    "badRequest": Failure.INVALID_REQUEST,
    "contextWindowExceeded": Failure.INVALID_REQUEST,
}


def status_failure(status: int) -> Failure:
    """An upstream HTTP status → taxonomy (the same table as the HTTP providers)."""
    if status == 429:
        return Failure.RATE_LIMITED
    if status in (401, 403):
        return Failure.AUTH_FAILED
    if status in (400, 404, 413, 422):
        return Failure.INVALID_REQUEST
    if status in (503, 529):
        return Failure.OVERLOADED
    if status >= 500:
        return Failure.UPSTREAM_ERROR
    return Failure.UPSTREAM_ERROR


def is_usage_limit(message: str) -> bool:
    return bool(_USAGE_LIMIT.search(message))


def is_connection_retry(message: str, details: str | None) -> bool:
    """A `willRetry: true` notice that the upstream cannot be reached at all."""
    return bool(_CONNECTION.search(f"{message} {details or ''}"))


def classify(
    provider: str, message: str, info: Any = None, *, now: datetime | None = None
) -> ProviderError:
    """One fatal Codex error (its text and app-server `codexErrorInfo`) → ProviderError."""
    status = _info_status(info) or _text_status(message)
    failure = _info_failure(info)
    if failure is None and is_usage_limit(message):
        failure = Failure.QUOTA_EXHAUSTED
    if failure is None and status is not None:
        failure = status_failure(status)
    if failure is None:
        failure = _text_failure(message)
    reset_at = None
    if failure is Failure.QUOTA_EXHAUSTED:
        reset_at = parse_reset_at(message, now or datetime.now(UTC))
    return ProviderError(
        failure,
        f"codex: {message}" if message else "codex: the turn failed",
        provider=provider,
        upstream_status=status,
        reset_at=reset_at,
    )


def _info_failure(info: Any) -> Failure | None:
    if isinstance(info, str):
        return _INFO_FAILURE.get(info)
    return None


def _info_status(info: Any) -> int | None:
    """`{"<kind>": {"httpStatusCode": 429}}` → 429."""
    if not isinstance(info, dict):
        return None
    for value in info.values():
        if isinstance(value, dict):
            status = value.get("httpStatusCode")
            if isinstance(status, int) and 100 <= status <= 599:
                return status
    return None


def _text_status(message: str) -> int | None:
    match = _STATUS_IN_TEXT.search(message)
    return int(match.group(1)) if match else None


def _text_failure(message: str) -> Failure:
    if _CONNECTION.search(message):
        return Failure.TRANSPORT
    if _IDLE.search(message):
        return Failure.TIMEOUT
    if _DISCONNECTED.search(message):
        return Failure.TRANSPORT
    return Failure.UPSTREAM_ERROR


def parse_reset_at(message: str, now: datetime) -> float | None:
    """When a usage limit lifts, from Codex's text; None if it does not say."""
    if match := _IN_DURATION.search(message):
        seconds = sum(
            int(n) * _UNIT_S[u.lower()] for n, u in _DURATION_PART.findall(match.group(1))
        )
        return (now + timedelta(seconds=seconds)).timestamp() if seconds else None
    if match := _AT_TIME.search(message):
        return _at_time(match, now)
    return None


def _at_time(match: re.Match[str], now: datetime) -> float | None:
    hour, minute = int(match["h"]), int(match["m"])
    ampm = (match["ampm"] or "").upper()
    if ampm == "PM" and hour != 12:
        hour += 12
    elif ampm == "AM" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59:
        return None
    if match["mon"]:
        return _on_date(match, hour, minute, now)
    at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if at <= now:
        at += timedelta(days=1)
    return at.timestamp()


def _on_date(match: re.Match[str], hour: int, minute: int, now: datetime) -> float | None:
    mon = match["mon"].lower()[:3]
    if mon not in _MONTHS:
        return None
    year = int(match["year"]) if match["year"] else now.year
    try:
        at = datetime(year, _MONTHS.index(mon) + 1, int(match["day"]), hour, minute, tzinfo=UTC)
    except ValueError:
        return None
    if not match["year"] and at < now - timedelta(days=1):
        at = at.replace(year=year + 1)  # "Jan 2nd" said in late December
    return at.timestamp()
