"""`GET /metrics`: Prometheus text that `prometheus_client` parses, counters that move with
traffic, owner-only unless loopback access without a key is configured."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from live_olp import OWNER, bearer, chat, get, two_hop_config
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from olp.accounts import Identity
from olp.server.metrics import MAX_SERIES, Metrics
from olp.server.outcome import RequestOutcome

from fakes.upstream import FakeUpstream, Slow, Status, Text
from olp_server import ThreadServer, olp_server


def scrape(server: ThreadServer) -> list[Sample]:
    resp = get(server, "/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return [s for family in text_string_to_metric_families(resp.text) for s in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 if none)."""
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_counters_move_with_traffic(olp: ThreadServer, alpha: FakeUpstream) -> None:
    before = scrape(olp)
    assert value(before, "olp_requests_total") == 0
    assert value(before, "olp_build_info", version="0.1.0") == 1
    alpha.script(Status(429, headers={"Retry-After": "600"}))
    for i in range(3):
        assert chat(olp, content=f"q{i}").headers["x-olp-provider-used"] == "beta"
    assert chat(olp, content="streamed", stream=True).status_code == 200
    assert chat(olp, model="no-such-model").status_code == 404
    assert chat(olp, headers=bearer("olp_" + "z" * 43)).status_code == 401

    after = scrape(olp)
    assert value(after, "olp_requests_total", provider="beta", status="200", model="b1") == 4
    assert value(after, "olp_requests_total", status="404", provider="none") == 1
    # Kept out of the dashboard's error list, but counted here.
    assert value(after, "olp_requests_total", status="401", provider="none") == 1
    assert value(after, "olp_request_duration_seconds_count", provider="beta") == 4
    assert value(after, "olp_request_duration_seconds_bucket", provider="beta", le="+Inf") == 4
    assert value(after, "olp_request_duration_seconds_sum", provider="beta") > 0
    assert value(after, "olp_time_to_first_token_seconds_count", provider="beta") >= 1
    # alpha failed once (429), then was skipped while it cools down.
    hops = "olp_hop_attempts_total"
    assert value(after, hops, provider="alpha", outcome="failed", code="RATE_LIMITED") == 1
    assert value(after, hops, provider="alpha", outcome="skipped", code="COOLDOWN") == 3
    assert value(after, hops, provider="beta", outcome="served") == 4
    assert value(after, "olp_fallbacks_total") == 4
    assert value(after, "olp_fallback_saves_total", provider="beta") == 4
    assert value(after, "olp_errors_total", code="model_not_found") == 1
    assert 590 < value(after, "olp_provider_cooldown_seconds", provider="alpha", model="a1") <= 600
    assert value(after, "olp_provider_state", provider="alpha", state="cooling_down") == 1
    assert value(after, "olp_provider_state", provider="beta", state="ok") == 1
    assert value(after, "olp_active_streams") == 0
    assert value(after, "olp_active_requests") == 0
    names = {s.name for s in after}
    assert {"olp_ledger_queue_depth", "olp_cache_hits_total", "olp_start_time_seconds"} <= names


def test_label_values_are_escaped(olp: ThreadServer) -> None:
    # provider/model addresses beta directly, with a model name full of awkward characters.
    model = 'beta/we"ird\\name'
    assert chat(olp, model=model).status_code == 200
    samples = scrape(olp)
    assert value(samples, "olp_requests_total", provider="beta", model='we"ird\\name') == 1


def test_owner_only_by_default(olp: ThreadServer, member_key: str) -> None:
    assert get(olp, "/metrics", headers=None).status_code == 401
    resp = get(olp, "/metrics", headers=bearer(member_key))
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "owner_required"
    assert get(olp, "/metrics", headers=OWNER).status_code == 200


def test_loopback_without_a_key_when_configured(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    config = two_hop_config(alpha, beta, auth={"metrics_loopback_unauthenticated": True})
    with olp_server(tmp_path, config) as server:
        resp = get(server, "/metrics", headers=None)
        assert resp.status_code == 200
        assert "olp_requests_total" in resp.text
        # Only /metrics: the management API still wants the owner key.
        assert get(server, "/v0/management/status", headers=None).status_code == 401


def outcome(model: str, status: int = 200) -> RequestOutcome:
    return RequestOutcome(
        request_id="req_1",
        started_at=0.0,
        identity=Identity(key_id="k", name="k", tier="member"),
        requested_model=model,
        provider="beta",
        model=model,
        hops=0,
        cache="miss",
        status=status,
        error_code=None,
        error_message=None,
        usage=None,
        stream=False,
        latency_ms=12.0,
        ttft_ms=None,
    )


def test_made_up_model_names_cannot_grow_memory_without_bound() -> None:
    metrics = Metrics(clock=lambda: 1_800_000_000.0)
    for i in range(MAX_SERIES + 500):
        metrics.observe(outcome(f"model-{i}"))
    assert len(metrics.requests) == MAX_SERIES + 1  # the cap, plus one "other" series
    assert metrics.requests[("beta", "other", "200", "miss")] == 500
    assert metrics.total_requests() == MAX_SERIES + 500


@pytest.mark.parametrize("status", [200, 503])
def test_median_latency_counts_only_answers(status: int) -> None:
    metrics = Metrics(clock=lambda: 1_800_000_000.0)
    for latency in (10.0, 30.0, 20.0):
        o = outcome("m", status)
        o.latency_ms = latency
        metrics.observe(o)
    latency, ttft = metrics.p50_ms("beta")
    assert latency == (20.0 if status == 200 else None)
    assert ttft is None


def test_active_requests_and_streams_gauges_follow_a_live_stream(tmp_path: Path) -> None:
    def gauges(server: ThreadServer) -> dict[str, float]:
        text = httpx.get(f"{server.base_url}/metrics", headers=OWNER).text
        return {
            sample.name: sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name in ("olp_active_requests", "olp_active_streams")
        }

    release = threading.Event()  # the upstream holds the stream after its first word
    with FakeUpstream() as up:
        up.script(Text(chunks=3, hold=release))
        config = {
            "providers": {
                "up": {"type": "openai-http", "base_url": up.openai_base_url, "models": ["m"]}
            }
        }
        with (
            olp_server(tmp_path, config) as server,
            httpx.stream(
                "POST",
                f"{server.base_url}/v1/chat/completions",
                headers=OWNER,
                timeout=20,
                json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
            ) as resp,
        ):
            lines = resp.iter_lines()
            next(lines)  # the stream is live
            try:
                assert gauges(server) == {"olp_active_requests": 1, "olp_active_streams": 1}
            finally:
                release.set()
            assert list(lines)[-2] == "data: [DONE]"
            assert gauges(server) == {"olp_active_requests": 0, "olp_active_streams": 0}


def test_requests_that_waited_for_a_slot_are_counted(tmp_path: Path) -> None:
    with FakeUpstream() as up:
        up.script(Slow(first_byte_delay_s=0.3), Slow(first_byte_delay_s=0.3))
        config = {
            "providers": {
                "up": {
                    "type": "openai-http",
                    "base_url": up.openai_base_url,
                    "models": ["m"],
                    "max_concurrent": 1,
                }
            }
        }
        with olp_server(tmp_path, config) as server, ThreadPoolExecutor(2) as pool:
            assert value(scrape(server), "olp_provider_queued_requests_total", provider="up") == 0
            answers = list(pool.map(lambda i: chat(server, model="m", content=f"q{i}"), range(2)))
            assert [a.status_code for a in answers] == [200, 200]
            queued = value(scrape(server), "olp_provider_queued_requests_total", provider="up")
            assert queued == 1
