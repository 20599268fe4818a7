"""Codex errors → the trigger taxonomy (docs/design.md §5). Pure: no I/O.

Structured first: app-server's `codexErrorInfo` (`usageLimitExceeded`,
`{"httpConnectionFailed": {"httpStatusCode": 401}}`,
`{"responseTooManyFailedAttempts": {"httpStatusCode": 429}}`, `internalServerError`, …);
then the text, which is all `exec` and older versions give ("You've hit your usage
limit … try again at 4:37 PM", "exceeded retry limit, last status: 429 …",
"unexpected status 503 Service Unavailable: …").

Reset times ("try again at 4:37 PM", "… in 5 days 22 hours 11 minutes") are read by the
shared `_reset_time`: Codex renders them in the child's zone, and every child runs with
TZ=UTC.
"""

from __future__ import annotations

import re
import time
from typing import Any

from olp.errors import Failure, ProviderError
from olp.providers._reset_time import parse_reset

__all__ = [
    "classify",
    "is_connection_retry",
    "is_usage_limit",
    "status_failure",
]

_USAGE_LIMIT = re.compile(
    r"hit your usage limit|usage limit (?:has been )?reached|usage_limit_reached"
    r"|out of codex messages|usage limit exceeded",
    re.IGNORECASE,
)
_STATUS_IN_TEXT = re.compile(r"(?:last status|unexpected status)[:\s]+(\d{3})\b", re.IGNORECASE)
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
    provider: str, message: str, info: Any = None, *, now: float | None = None
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
        reset_at = parse_reset(message, time.time() if now is None else now)
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
