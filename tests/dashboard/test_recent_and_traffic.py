"""The in-memory pieces behind the status page: scrubbed messages, the last-50 rings and
the per-minute traffic buckets."""

from __future__ import annotations

import pytest

from olp.accounts import Identity
from olp.server.outcome import RequestOutcome
from olp.server.recent import RING_SIZE, RecentEvents, scrub
from olp.server.traffic import KEEP_MINUTES, Traffic

T0 = 1_800_000_000.0  # a minute boundary (divisible by 60)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("spawn /home/bob/.local/bin/claude failed", "spawn [path] failed"),
        ("cannot read ~/.claude/.credentials.json", "cannot read [path]"),
        ("open C:\\Users\\bob\\AppData\\x.json: denied", "open [path]: denied"),
        ("(see ./logs/olp/today.log)", "(see [path])"),
        ("POST /v1/chat/completions gave 404", "POST /v1/chat/completions gave 404"),
        ("https://api.example.com/v1/a/b refused", "https://api.example.com/v1/a/b refused"),
        ("model gpt-4o/mini and a/b", "model gpt-4o/mini and a/b"),
        ("key olp_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG rejected", "key [secret] rejected"),
        ("bad sk-proj-abcdefghijklmnop1234", "bad [secret]"),
        (None, None),
    ],
)
def test_scrub(message: str | None, expected: str | None) -> None:
    assert scrub(message) == expected


def test_scrub_cuts_long_messages_to_200_characters() -> None:
    text = scrub("x" * 5000)
    assert text is not None and len(text) == 200 and text.endswith("…")
    assert scrub("y" * 200) == "y" * 200


def outcome(status: int, request_id: str = "req_1") -> RequestOutcome:
    return RequestOutcome(
        request_id=request_id,
        started_at=T0,
        identity=Identity(key_id="k", name="kid", tier="member"),
        requested_model="chat",
        provider="none" if status >= 400 else "beta",
        model="m",
        hops=0,
        cache="bypass",
        status=status,
        error_code="some_code" if status >= 400 else None,
        error_message="failed at /var/lib/olp/x.db" if status >= 400 else None,
        usage=None,
        stream=False,
        latency_ms=5.0,
        ttft_ms=None,
    )


def test_error_ring_keeps_the_last_50_and_never_401_or_403() -> None:
    recent = RecentEvents()
    for i in range(RING_SIZE + 10):
        recent.add(T0 + i, outcome(503, f"req_{i}"))
        recent.add(T0 + i, outcome(401))
        recent.add(T0 + i, outcome(403))
        recent.add(T0 + i, outcome(200))
    errors = recent.errors_json()
    assert len(errors) == RING_SIZE
    assert {e["status"] for e in errors} == {503}
    assert errors[0]["request_id"] == f"req_{RING_SIZE + 9}"  # newest first
    assert errors[-1]["request_id"] == "req_10"
    assert errors[0]["message"] == "failed at [path]"
    assert errors[0]["provider"] is None and errors[0]["key_name"] == "kid"


def test_traffic_minutes_and_hours() -> None:
    traffic = Traffic()
    traffic.add(T0 - 3600 * 3 + 5, "alpha", 200)  # three hours ago
    traffic.add(T0 - 120, "alpha", 200)  # T0 is a minute boundary: these two share the
    traffic.add(T0 - 61, "beta", 503)  # minute two before the current one
    traffic.add(T0 - 59, "beta", 200)
    traffic.add(T0 + 1, "alpha", 200)  # the current, still-filling minute
    report = traffic.report(T0 + 2)
    hour = report["last_hour"]
    assert hour["start"] == T0 - 59 * 60 and hour["step_s"] == 60
    assert hour["total"][-3:] == [2, 1, 1]
    assert hour["requests"] == 4 and hour["errors"] == 1
    assert hour["by_provider"] == {
        "alpha": [0] * 57 + [1, 0, 1],
        "beta": [0] * 57 + [1, 1, 0],
    }
    assert hour["by_status"]["503"][-3] == 1
    assert report["requests_last_minute"] == 1
    day = traffic.report(T0 + 2)["last_24h"]
    assert len(day["total"]) == 24 and day["step_s"] == 3600
    assert day["requests"] == 5 and day["total"][-1] == 4 and day["total"][-4] == 1


def test_traffic_forgets_what_is_older_than_a_day() -> None:
    traffic = Traffic()
    traffic.add(T0, "alpha", 200)
    traffic.add(T0 + KEEP_MINUTES * 60, "alpha", 200)  # a day later: the old minute goes
    report = traffic.report(T0 + KEEP_MINUTES * 60)
    assert report["last_24h"]["requests"] == 1
    traffic.add(T0 + KEEP_MINUTES * 60 - 30, "beta", 200)  # the clock stepped back
    assert traffic.report(T0 + KEEP_MINUTES * 60)["last_24h"]["requests"] == 2
