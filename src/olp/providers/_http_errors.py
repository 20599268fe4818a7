"""Upstream status, body and headers → `ProviderError` and quota signals (docs/design.md §5, §6).

Pure functions (no I/O) shared by every HTTP provider: one table decides which taxonomy
code an upstream answer means, one parser reads the many ways upstreams say "come back
later" (`Retry-After`, `retry-after-ms`, OpenAI's `x-ratelimit-reset-*` Go durations,
Anthropic's RFC 3339 `anthropic-ratelimit-*-reset`).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import orjson

from olp.errors import Failure, ProviderError
from olp.providers._reset_time import MAX_WAIT_S, plausible_reset
from olp.providers.base import QuotaSnapshot

__all__ = [
    "ERROR_BODY_CAP",
    "QuotaMemory",
    "error_for_status",
    "error_from_payload",
    "parse_go_duration",
    "parse_reset",
    "parse_retry_after",
    "quota_from_headers",
]

# Error bodies are read only this far: enough for any real error message.
ERROR_BODY_CAP = 64 * 1024
_MESSAGE_CAP = 500

# A 429 (or 400/402) that says the account, not the minute, is out (docs/design.md §5: the whole
# provider cools down until the reset). OpenAI says `insufficient_quota`; Anthropic says
# "credit balance is too low"; OpenRouter and others speak of credits and billing.
_QUOTA_SIGNAL = re.compile(
    r"insufficient_quota|billing|exceeded your current quota|quota (?:exceeded|exhausted)"
    r"|credit balance|out of credits|credits? (?:exhausted|depleted)"
    r"|insufficient (?:credits?|balance|funds)|usage limit|spending limit",
    re.IGNORECASE,
)
# OpenAI puts the wait in the message too: "Please try again in 6m0s." / "in 20ms".
_TRY_AGAIN = re.compile(r"try again in ((?:\d+(?:\.\d+)?(?:ns|us|µs|ms|h|m|s))+)")
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|h|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

# Error `type`/`code` values (OpenAI and Anthropic vocabularies) → taxonomy. Used for
# mid-stream error frames, where there is no HTTP status to go by.
_KIND_FAILURE: dict[str, Failure] = {
    "insufficient_quota": Failure.QUOTA_EXHAUSTED,
    "billing_error": Failure.QUOTA_EXHAUSTED,
    "rate_limit_exceeded": Failure.RATE_LIMITED,
    "rate_limit_error": Failure.RATE_LIMITED,
    "requests": Failure.RATE_LIMITED,
    "tokens": Failure.RATE_LIMITED,
    "overloaded_error": Failure.OVERLOADED,
    "overloaded": Failure.OVERLOADED,
    "server_overloaded": Failure.OVERLOADED,
    "service_unavailable": Failure.OVERLOADED,
    "api_error": Failure.UPSTREAM_ERROR,
    "server_error": Failure.UPSTREAM_ERROR,
    "internal_error": Failure.UPSTREAM_ERROR,
    "timeout_error": Failure.TIMEOUT,
    "authentication_error": Failure.AUTH_FAILED,
    "invalid_api_key": Failure.AUTH_FAILED,
    "permission_error": Failure.AUTH_FAILED,
    "invalid_request_error": Failure.INVALID_REQUEST,
    "not_found_error": Failure.INVALID_REQUEST,
    "request_too_large": Failure.INVALID_REQUEST,
    "context_length_exceeded": Failure.INVALID_REQUEST,
}

# Resources whose `remaining`/`reset` headers we read, as (remaining, reset) pairs.
_OPENAI_RESOURCES = (
    ("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", "x-ratelimit-limit-requests"),
    ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens", "x-ratelimit-limit-tokens"),
)
_ANTHROPIC_RESOURCES = tuple(
    (
        f"anthropic-ratelimit-{r}-remaining",
        f"anthropic-ratelimit-{r}-reset",
        f"anthropic-ratelimit-{r}-limit",
    )
    for r in ("requests", "tokens", "input-tokens", "output-tokens")
)
_RESOURCES = _OPENAI_RESOURCES + _ANTHROPIC_RESOURCES
_UNIFIED_RESET = "anthropic-ratelimit-unified-reset"
# One of these on a response means it carries rate-limit headers worth remembering.
_MARKERS = (
    "anthropic-ratelimit-unified-5h-utilization",
    "x-codex-primary-used-percent",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-tokens-remaining",
    _UNIFIED_RESET,
)


def error_for_status(
    provider: str, status: int, headers: Mapping[str, str], body: bytes
) -> ProviderError:
    """The taxonomy error for a non-2xx upstream answer (docs/design.md §5)."""
    message, kind, param = _describe_body(body)
    failure = _failure_for_status(status, kind, message)
    now = time.time()
    retry_after, reset_at = _timing(headers, now, message)
    if failure is Failure.QUOTA_EXHAUSTED and reset_at is None and retry_after is not None:
        reset_at = now + retry_after
    return ProviderError(
        failure,
        f"upstream HTTP {status}: {message}",
        provider=provider,
        upstream_status=status,
        retry_after=retry_after,
        reset_at=reset_at,
        param=param,
    )


def error_from_payload(provider: str, error: Any) -> ProviderError:
    """The taxonomy error for an error object inside a 200 answer (a mid-stream frame)."""
    if not isinstance(error, dict):
        error = {"message": str(error)}
    message = _trim(str(error.get("message") or "no message"))
    kind = " ".join(str(error[k]) for k in ("type", "code") if error.get(k))
    failure = _failure_for_kind(kind, message) or Failure.UPSTREAM_ERROR
    param = error.get("param")
    match = _TRY_AGAIN.search(message)
    return ProviderError(
        failure,
        f"upstream error: {message}",
        provider=provider,
        retry_after=parse_go_duration(match.group(1)) if match else None,
        param=param if isinstance(param, str) else None,
    )


def _failure_for_status(status: int, kind: str, message: str) -> Failure:
    quota = bool(_QUOTA_SIGNAL.search(kind) or _QUOTA_SIGNAL.search(message))
    if status == 429:
        return Failure.QUOTA_EXHAUSTED if quota else Failure.RATE_LIMITED
    # 402 Payment Required is how OpenRouter and others say "out of credits"; Anthropic
    # says it with a 400 ("credit balance is too low"). Either way the account is out,
    # which is a fallback, not the client's fault.
    if status == 402 or (status == 400 and quota):
        return Failure.QUOTA_EXHAUSTED
    if status in (503, 529):
        return Failure.OVERLOADED
    if status >= 500:
        return Failure.UPSTREAM_ERROR
    if status in (401, 403):
        return Failure.AUTH_FAILED
    if status in (400, 404, 413, 422):
        return Failure.INVALID_REQUEST
    if status == 408:
        return Failure.TIMEOUT
    # Anything else (3xx, 405, 409, 415, 418, ...) says the upstream or OLP's configuration
    # of it is off (a wrong base_url answers 405), not that the client's request is wrong:
    # another provider can serve it, so fall back rather than blame the client.
    return Failure.UPSTREAM_ERROR


def _failure_for_kind(kind: str, message: str) -> Failure | None:
    if _QUOTA_SIGNAL.search(kind) or _QUOTA_SIGNAL.search(message):
        return Failure.QUOTA_EXHAUSTED
    for word in kind.split():
        failure = _KIND_FAILURE.get(word)
        if failure is not None:
            return failure
    return None


def _describe_body(body: bytes) -> tuple[str, str, str | None]:
    """(message, "type code", param) from an error body, JSON or not."""
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        error = doc.get("error", doc)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail") or doc.get("message")
            kind = " ".join(str(error[k]) for k in ("type", "code") if error.get(k))
            param = error.get("param")
            if message:
                return _trim(str(message)), kind, param if isinstance(param, str) else None
        elif isinstance(error, str) and error:
            return _trim(error), "", None
    text = body.decode("utf-8", "replace") if body else ""
    return _trim(text) or "(empty body)", "", None


def _trim(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CAP else text[: _MESSAGE_CAP - 1] + "…"


def _timing(
    headers: Mapping[str, str], now: float, message: str
) -> tuple[float | None, float | None]:
    """(retry_after seconds, reset_at unix) from headers, else from the message text."""
    retry_after = parse_retry_after(headers, now)
    snapshot = quota_from_headers(headers, now)
    reset_at = snapshot.reset_at if snapshot is not None else None
    if retry_after is None and reset_at is not None:
        retry_after = max(0.0, reset_at - now)
    if retry_after is None:
        match = _TRY_AGAIN.search(message)
        if match:
            retry_after = parse_go_duration(match.group(1))
    return retry_after, reset_at


def parse_retry_after(headers: Mapping[str, str], now: float) -> float | None:
    """`retry-after-ms` (more precise, OpenAI) or `Retry-After` (seconds or HTTP-date)."""
    value = headers.get("retry-after-ms")
    millis = _finite(value) if value else None
    if millis is not None:
        return min(max(0.0, millis / 1000.0), MAX_WAIT_S)
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _finite(value)
    if seconds is not None:
        return min(max(0.0, seconds), MAX_WAIT_S)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, when.timestamp() - now), MAX_WAIT_S)


def parse_go_duration(text: str) -> float | None:
    """Go's time.Duration text ("1s", "6m0s", "1h2m3.5s", "20ms") → seconds."""
    pos, total = 0, 0.0
    for match in _GO_PART.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _GO_UNITS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos else None


def parse_reset(text: str, now: float) -> float | None:
    """A reset hint in any common form → unix time.

    Numbers are unix seconds (or milliseconds) when large, else seconds from now; then Go
    durations (OpenAI); then RFC 3339 timestamps (Anthropic).
    """
    text = text.strip()
    number = _finite(text)
    if number is not None:
        if number > 1e12:
            return plausible_reset(number / 1000.0, now)
        return plausible_reset(number if number > 1e9 else now + max(0.0, number), now)
    seconds = parse_go_duration(text)
    if seconds is not None:
        return plausible_reset(now + seconds, now)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return plausible_reset(when.timestamp(), now)


def quota_from_headers(headers: Mapping[str, str], now: float) -> QuotaSnapshot | None:
    """What rate-limit headers say, or None when a response carries none.

    `reset_at` is when the exhausted resource comes back (the latest, if several are out);
    with nothing exhausted, when the last window refills.
    """
    remaining: dict[str, int] = {}
    resets_all: list[float] = []
    resets_out: list[float] = []
    utilisation: float | None = None
    for rem_key, reset_key, limit_key in _RESOURCES:
        rem = _int(headers.get(rem_key))
        raw_reset = headers.get(reset_key)
        reset = parse_reset(raw_reset, now) if raw_reset else None
        if rem is None and reset is None:
            continue
        kind = "requests" if "requests" in rem_key else "tokens"
        if rem is not None:
            remaining[kind] = min(rem, remaining.get(kind, rem))
            limit = _int(headers.get(limit_key))
            if limit:
                used = 1.0 - rem / limit
                utilisation = used if utilisation is None else max(utilisation, used)
        if reset is not None:
            resets_all.append(reset)
            if rem == 0:
                resets_out.append(reset)
    unified = headers.get(_UNIFIED_RESET)
    if unified:
        reset = parse_reset(unified, now)
        if reset is not None:
            resets_all.append(reset)
    five_hour, five_hour_reset = _five_hour(headers, now)
    if not remaining and not resets_all and five_hour is None:
        return None
    resets = resets_out or resets_all
    return QuotaSnapshot(
        five_hour_utilisation=five_hour,
        five_hour_reset_at=five_hour_reset,
        utilisation=None if utilisation is None else min(1.0, max(0.0, utilisation)),
        reset_at=max(resets) if resets else None,
        remaining_requests=remaining.get("requests"),
        remaining_tokens=remaining.get("tokens"),
        source="headers",
    )


def _five_hour(headers: Mapping[str, str], now: float) -> tuple[float | None, float | None]:
    """Subscription windows, (utilisation 0..1, reset): Anthropic's unified 5h headers, or
    Codex's primary window (in %) when it is the 5-hour one."""
    raw = headers.get("anthropic-ratelimit-unified-5h-utilization")
    raw_reset = headers.get("anthropic-ratelimit-unified-5h-reset")
    scale = 1.0
    if raw is None and headers.get("x-codex-primary-window-minutes") == "300":
        raw, scale = headers.get("x-codex-primary-used-percent"), 100.0
        raw_reset = headers.get("x-codex-primary-reset-at")
    number = _finite(raw) if raw is not None else None
    if number is None:
        return None, None
    reset = parse_reset(raw_reset, now) if raw_reset else None
    return min(1.0, max(0.0, number / scale)), reset


def _int(value: str | None) -> int | None:
    """A count from a header ("12", "12.0"): a non-negative integer below 2**53, or None."""
    number = _finite(value) if value else None
    if number is None or not 0 <= number < 2**53:
        return None
    return int(number)


def _finite(text: str) -> float | None:
    """A header's number; "nan", "inf" and anything else that is not finite: None."""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


class QuotaMemory:
    """The latest rate-limit headers one provider saw, parsed only when asked.

    Keeping a reference to the (immutable) header mapping costs nothing on the hot path;
    parsing waits for `snapshot()`, which the dashboard calls far less often than
    responses arrive.
    """

    __slots__ = ("_headers", "_seen_at")

    def __init__(self) -> None:
        self._headers: Mapping[str, str] | None = None
        self._seen_at = 0.0

    def note(self, headers: Mapping[str, str]) -> None:
        for marker in _MARKERS:
            if marker in headers:
                self._headers = headers
                self._seen_at = time.time()
                return

    def snapshot(self) -> QuotaSnapshot | None:
        if self._headers is None:
            return None
        # Relative resets ("6m0s") count from when the response arrived, not from now.
        return quota_from_headers(self._headers, self._seen_at)
