"""Upstream status/body/headers → taxonomy and quota signals, pure (no server)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from email.utils import formatdate

import orjson
import pytest

from olp.errors import Failure
from olp.providers._http_errors import (
    QuotaMemory,
    error_for_status,
    error_from_payload,
    parse_go_duration,
    parse_reset,
    parse_retry_after,
    quota_from_headers,
)

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("1h2m3.5s", 3723.5),
        ("20ms", 0.02),
        ("150us", 0.00015),
        ("", None),
        ("soon", None),
        ("5", None),
        ("1s junk", None),
    ],
)
def test_go_durations(text: str, seconds: float | None) -> None:
    assert parse_go_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30", NOW + 30),
        ("6m0s", NOW + 360),
        ("2027-01-15T08:00:00Z", datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()),
        ("2027-01-15T09:00:00+01:00", datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()),
        ("1810000000", 1_810_000_000.0),
        ("1810000000000", 1_810_000_000.0),
        ("whenever", None),
        # Not finite, or no plausible reset: ignored rather than believed.
        ("inf", None),
        ("nan", None),
        ("1e300", None),
        ("9999-12-31T23:59:59Z", None),
        ("0001-01-01T00:00:00Z", None),
    ],
)
def test_reset_forms(text: str, expected: float | None) -> None:
    assert parse_reset(text, NOW) == expected


def test_retry_after_forms() -> None:
    now = time.time()
    assert parse_retry_after({"retry-after": "12"}, now) == 12.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "12"}, now) == 0.25
    date = formatdate(now + 90, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now) == pytest.approx(90, abs=1.5)
    assert parse_retry_after({"retry-after": "not a date"}, now) is None
    assert parse_retry_after({}, now) is None
    # Not a number an upstream meant: never an endless wait.
    assert parse_retry_after({"retry-after": "inf"}, now) is None
    assert parse_retry_after({"retry-after-ms": "nan", "retry-after": "3"}, now) == 3.0
    assert parse_retry_after({"retry-after": "1e300"}, now) == 400 * 86400


def test_rate_limit_headers_that_are_no_numbers_are_ignored() -> None:
    headers = {
        "x-ratelimit-remaining-requests": "INF",
        "x-ratelimit-limit-requests": "nan",
        "x-ratelimit-remaining-tokens": "1e300",
        "x-ratelimit-reset-tokens": "9999-12-31T00:00:00Z",
    }
    assert quota_from_headers(headers, NOW) is None
    error = error_for_status("p", 429, headers, b"")
    assert error.failure is Failure.RATE_LIMITED and error.reset_at is None


def test_quota_picks_the_exhausted_resource_reset() -> None:
    snapshot = quota_from_headers(
        {
            "x-ratelimit-remaining-requests": "10",
            "x-ratelimit-reset-requests": "1s",
            "x-ratelimit-remaining-tokens": "0",
            "x-ratelimit-reset-tokens": "30s",
        },
        NOW,
    )
    assert snapshot is not None
    assert snapshot.reset_at == NOW + 30
    assert snapshot.remaining_requests == 10
    assert snapshot.remaining_tokens == 0


def test_anthropic_token_classes_report_the_tightest_remaining() -> None:
    snapshot = quota_from_headers(
        {
            "anthropic-ratelimit-input-tokens-remaining": "900",
            "anthropic-ratelimit-output-tokens-remaining": "80",
            "anthropic-ratelimit-tokens-remaining": "980",
        },
        NOW,
    )
    assert snapshot is not None
    assert snapshot.remaining_tokens == 80
    assert snapshot.remaining_requests is None


def test_the_five_hour_window_keeps_its_own_reset() -> None:
    # The unified reset is the representative window's (here the weekly one): a 5-hour
    # soft trigger must clear at the 5-hour window's reset, not days later.
    anthropic = quota_from_headers(
        {
            "anthropic-ratelimit-unified-5h-utilization": "0.93",
            "anthropic-ratelimit-unified-5h-reset": str(int(NOW) + 3600),
            "anthropic-ratelimit-unified-reset": str(int(NOW) + 4 * 86400),
        },
        NOW,
    )
    assert anthropic is not None
    assert anthropic.five_hour_utilisation == pytest.approx(0.93)
    assert anthropic.five_hour_reset_at == int(NOW) + 3600
    assert anthropic.reset_at == int(NOW) + 4 * 86400
    codex = quota_from_headers(
        {
            "x-codex-primary-used-percent": "40",
            "x-codex-primary-window-minutes": "300",
            "x-codex-primary-reset-at": str(int(NOW) + 600),
        },
        NOW,
    )
    assert codex is not None
    assert (codex.five_hour_utilisation, codex.five_hour_reset_at) == (0.4, int(NOW) + 600)


def test_no_rate_limit_headers_means_no_snapshot() -> None:
    assert quota_from_headers({"content-type": "application/json"}, NOW) is None
    memory = QuotaMemory()
    memory.note({"content-type": "application/json"})
    assert memory.snapshot() is None
    memory.note({"x-ratelimit-remaining-requests": "3"})
    snapshot = memory.snapshot()
    assert snapshot is not None
    assert snapshot.remaining_requests == 3


def test_try_again_in_the_message_is_a_last_resort_wait() -> None:
    body = orjson.dumps(
        {"error": {"message": "Rate limit reached. Please try again in 1m30s.", "type": "tokens"}}
    )
    error = error_for_status("p", 429, {}, body)
    assert error.failure is Failure.RATE_LIMITED
    assert error.retry_after == 90.0


def test_quota_exhausted_without_a_reset_header_uses_retry_after() -> None:
    body = orjson.dumps({"error": {"message": "quota", "type": "insufficient_quota"}})
    before = time.time()
    error = error_for_status("p", 429, {"retry-after": "60"}, body)
    assert error.failure is Failure.QUOTA_EXHAUSTED
    assert error.reset_at is not None
    assert before + 59 <= error.reset_at <= time.time() + 61


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": "plain string"}', "upstream HTTP 500: plain string"),
        (b'{"detail": "fastapi style"}', "upstream HTTP 500: fastapi style"),
        (b'{"message": "top level"}', "upstream HTTP 500: top level"),
        (b"", "upstream HTTP 500: (empty body)"),
        (b"\xff\xfe broken", "upstream HTTP 500: \ufffd\ufffd broken"),
    ],
)
def test_message_extraction(body: bytes, message: str) -> None:
    assert error_for_status("p", 500, {}, body).message == message


def test_mid_stream_payload_with_retry_hint() -> None:
    error = error_from_payload("p", {"message": "try again in 2s", "code": "rate_limit_exceeded"})
    assert error.failure is Failure.RATE_LIMITED
    assert error.retry_after == 2.0
