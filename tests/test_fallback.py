"""Every row of the trigger table (docs/design.md §5), end to end: real OLP, real fake upstreams."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fakes.upstream import (
    DieMidStream,
    FakeUpstream,
    Garbage,
    Hang,
    Status,
    Text,
)
from olp_server import OWNER_TOKEN, ThreadServer, olp_server, sse_text

# Short enough for the hanging-upstream cases to be quick, long enough for a fake upstream
# in this process to answer while the rest of the suite loads both cores (at 400 ms, one
# answered too late now and then: a 503 where a 429 was due).
TIMEOUTS = {"connect_ms": 1000, "first_byte_ms": 1500, "idle_ms": 1500, "total_ms": 5000}


def two_hop_config(alpha: FakeUpstream, beta: FakeUpstream | str, **extra: Any) -> dict[str, Any]:
    beta_url = beta if isinstance(beta, str) else beta.openai_base_url
    return {
        "providers": {
            "alpha": {
                "type": "openai-http",
                "base_url": alpha.openai_base_url,
                "timeouts": TIMEOUTS,
                "models": ["m-alpha", "m-alpha-2"],
            },
            "beta": {"type": "openai-http", "base_url": beta_url, "timeouts": TIMEOUTS},
        },
        "routing": {
            "chains": {
                "chat": [
                    {"provider": "alpha", "model": "m-alpha"},
                    {"provider": "beta", "model": "m-beta"},
                ],
                "chat2": [
                    {"provider": "alpha", "model": "m-alpha-2"},
                    {"provider": "beta", "model": "m-beta"},
                ],
            }
        },
        **extra,
    }


@pytest.fixture
def olp(tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream) -> Iterator[ThreadServer]:
    with olp_server(tmp_path, two_hop_config(alpha, beta)) as server:
        yield server


def post(server: ThreadServer, body: dict[str, Any], **kw: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {OWNER_TOKEN}", **kw.pop("headers", {})}
    return httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=headers, timeout=10, **kw
    )


def ask(model: str = "chat", stream: bool = False) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}


def detail(resp: httpx.Response) -> list[dict[str, Any]]:
    value: list[dict[str, Any]] = json.loads(resp.headers["x-olp-fallback-detail"])
    return value


def test_primary_serves_with_zero_hops(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    alpha.script(Text("from alpha"))
    resp = post(olp, ask())
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "from alpha"
    assert resp.headers["x-olp-provider-used"] == "alpha"
    assert resp.headers["x-olp-model-used"] == "m-alpha"
    assert resp.headers["x-olp-fallback-hops"] == "0"
    assert "x-olp-fallback-detail" not in resp.headers
    assert alpha.requests[0].json["model"] == "m-alpha"
    assert beta.calls == 0


@pytest.mark.parametrize(
    ("behaviour", "code"),
    [
        (
            Status(
                429,
                {"error": {"message": "slow down", "type": "rate_limit"}},
                {"retry-after": "20"},
            ),
            "RATE_LIMITED",
        ),
        (
            Status(
                429,
                {
                    "error": {
                        "message": "You exceeded your current quota",
                        "type": "insufficient_quota",
                        "code": "insufficient_quota",
                    }
                },
            ),
            "QUOTA_EXHAUSTED",
        ),
        (Status(529, {"error": {"message": "overloaded"}}), "OVERLOADED"),
        (Status(503, {"error": {"message": "overloaded"}}), "OVERLOADED"),
        (Status(500, {"error": {"message": "boom"}}), "UPSTREAM_ERROR"),
        (Status(502, "bad gateway"), "UPSTREAM_ERROR"),
        (Garbage(b"<html>not json</html>"), "UPSTREAM_ERROR"),
        (Hang(3.0), "TIMEOUT"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_fallback_triggers_move_to_next_hop(
    olp: ThreadServer,
    alpha: FakeUpstream,
    beta: FakeUpstream,
    behaviour: Any,
    code: str,
    stream: bool,
) -> None:
    alpha.script(behaviour)
    beta.script(Text("from beta"))
    client = openai.OpenAI(base_url=f"{olp.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": "hi"}], stream=stream
    )
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    else:
        text = raw.parse().choices[0].message.content or ""
    assert text == "from beta"
    assert raw.headers["x-olp-provider-used"] == "beta"
    assert raw.headers["x-olp-fallback-hops"] == "1"
    [failed] = json.loads(raw.headers["x-olp-fallback-detail"])
    assert failed["provider"] == "alpha"
    assert failed["code"] == code
    assert failed["trigger"] == "fallback"
    assert alpha.calls == 1 and beta.calls == 1


def test_transport_failure_falls_back(tmp_path: Path, beta: FakeUpstream) -> None:
    with FakeUpstream() as gone:
        dead_url = gone.openai_base_url
    config = two_hop_config(beta, beta)
    config["providers"]["alpha"]["base_url"] = dead_url  # nothing listens there now
    with olp_server(tmp_path, config) as server:
        resp = post(server, ask())
    assert resp.status_code == 200
    assert resp.headers["x-olp-provider-used"] == "beta"
    assert detail(resp)[0]["code"] == "TRANSPORT"


def test_rate_limit_cools_that_model_down(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    alpha.script(Status(429, {"error": {"message": "slow down"}}, {"retry-after": "30"}))
    assert post(olp, ask()).headers["x-olp-provider-used"] == "beta"
    # Same provider+model is skipped without a request...
    again = post(olp, ask())
    assert again.headers["x-olp-provider-used"] == "beta"
    assert alpha.calls == 1
    [skipped] = detail(again)
    assert skipped["code"] == "COOLDOWN" and skipped["trigger"] == "skip"
    # ...but another model on the same provider still runs.
    other = post(olp, ask("chat2"))
    assert other.headers["x-olp-provider-used"] == "alpha"
    assert alpha.calls == 2


def test_quota_exhausted_cools_the_whole_provider(olp: ThreadServer, alpha: FakeUpstream) -> None:
    alpha.script(Status(429, {"error": {"message": "quota", "code": "insufficient_quota"}}))
    assert post(olp, ask()).headers["x-olp-provider-used"] == "beta"
    other = post(olp, ask("chat2"))
    assert other.headers["x-olp-provider-used"] == "beta"
    assert detail(other)[0]["code"] == "COOLDOWN"
    assert alpha.calls == 1


def test_overload_does_not_cool_down(olp: ThreadServer, alpha: FakeUpstream) -> None:
    alpha.script(Status(529, {"error": {"message": "overloaded"}}))
    assert post(olp, ask()).headers["x-olp-provider-used"] == "beta"
    assert post(olp, ask()).headers["x-olp-provider-used"] == "alpha"
    assert alpha.calls == 2


@pytest.mark.parametrize("status", [401, 403])
def test_upstream_auth_failure_is_502_and_stops(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream, status: int
) -> None:
    alpha.script(Status(status, {"error": {"message": "bad key"}}))
    resp = post(olp, ask())
    assert resp.status_code == 502
    err = resp.json()["error"]
    assert err["code"] == "provider_auth_failed"
    assert err["provider"] == "alpha"
    assert "bad key" in err["message"]
    assert beta.calls == 0
    assert detail(resp)[0]["trigger"] == "stop"


@pytest.mark.parametrize("status", [400, 404, 413, 422])
def test_upstream_invalid_request_passes_through(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream, status: int
) -> None:
    alpha.script(Status(status, {"error": {"message": "messages too long", "param": "messages"}}))
    resp = post(olp, ask())
    assert resp.status_code == status
    err = resp.json()["error"]
    assert err["code"] == "provider_invalid_request"
    assert "messages too long" in err["message"]
    assert resp.headers["x-olp-provider-used"] == "alpha"
    assert beta.calls == 0


def test_death_after_first_content_truncates_without_fallback(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    alpha.script(DieMidStream(after_chunks=2))
    client = openai.OpenAI(base_url=f"{olp.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert text  # the partial content the client already has
    assert finish == ["length"]
    assert raw.headers["x-olp-provider-used"] == "alpha"
    assert beta.calls == 0


def test_cut_body_before_anything_was_sent_falls_back(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    """A non-streaming client has received nothing when the upstream dies: fall back."""
    alpha.script(DieMidStream(after_chunks=2))
    beta.script(Text("whole answer"))
    resp = post(olp, ask())
    assert resp.json()["choices"][0]["message"]["content"] == "whole answer"
    assert resp.headers["x-olp-provider-used"] == "beta"


def test_exhaustion_returns_first_error_with_retry_after(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    alpha.script(Status(500, {"error": {"message": "alpha broke"}}))
    beta.script(Status(503, {"error": {"message": "beta overloaded"}}, {"retry-after": "7"}))
    resp = post(olp, ask())
    assert resp.status_code == 503
    err = resp.json()["error"]
    assert err["code"] == "all_providers_failed"
    assert "alpha broke" in err["message"]
    assert err["provider"] == "alpha"
    assert resp.headers["retry-after"] == "7"
    assert resp.headers["x-olp-fallback-exhausted"] == "alpha,beta"
    # No provider answered; the hops header counts the hops tried.
    assert resp.headers["x-olp-provider-used"] == "none"
    assert resp.headers["x-olp-model-used"] == "none"
    assert resp.headers["x-olp-fallback-hops"] == "2"
    assert [d["code"] for d in detail(resp)] == ["UPSTREAM_ERROR", "OVERLOADED"]


def test_exhaustion_on_rate_limits_is_429(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    alpha.script(Status(429, {"error": {"message": "a"}}, {"retry-after": "40"}))
    beta.script(Status(429, {"error": {"message": "b"}}, {"retry-after": "12"}))
    resp = post(olp, ask())
    assert resp.status_code == 429
    assert resp.headers["retry-after"] == "12"
    # Both now cool down: the next request is skipped entirely, without any request.
    again = post(olp, ask())
    assert again.status_code == 429
    assert again.json()["error"]["code"] == "no_provider_available"
    assert alpha.calls == 1 and beta.calls == 1
    assert 1 <= int(again.headers["retry-after"]) <= 12


def test_detail_header_is_owner_only_by_default(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    config = two_hop_config(alpha, beta, auth={"fallback_detail_header_policy": "none"})
    alpha.script(Status(500, {"error": {"message": "x"}}))
    with olp_server(tmp_path, config) as server:
        resp = post(server, ask())
    assert resp.headers["x-olp-provider-used"] == "beta"
    assert "x-olp-fallback-detail" not in resp.headers


def test_heartbeat_keeps_stream_alive_while_falling_back(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    config = two_hop_config(alpha, beta, server={"heartbeat_interval_ms": 100})
    alpha.script(Hang(3.0))  # abandoned at first_byte_ms → beta
    beta.script(Text("after the wait"))
    with (
        olp_server(tmp_path, config) as server,
        httpx.stream(
            "POST",
            f"{server.base_url}/v1/chat/completions",
            json=ask(stream=True),
            headers={"authorization": f"Bearer {OWNER_TOKEN}"},
            timeout=10,
        ) as resp,
    ):
        assert resp.status_code == 200
        body = resp.read().decode()
    assert body.startswith(": keepalive\n\n")
    assert sse_text(body) == "after the wait"
    assert body.rstrip().endswith("data: [DONE]")


def test_heartbeat_then_exhaustion_sends_error_frame(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    config = two_hop_config(alpha, beta, server={"heartbeat_interval_ms": 100})
    alpha.script(Hang(3.0))
    beta.script(Hang(3.0))
    with (
        olp_server(tmp_path, config) as server,
        httpx.stream(
            "POST",
            f"{server.base_url}/v1/chat/completions",
            json=ask(stream=True),
            headers={"authorization": f"Bearer {OWNER_TOKEN}"},
            timeout=10,
        ) as resp,
    ):
        body = resp.read().decode()
    frames = [line for line in body.splitlines() if line.startswith("data: ")]
    error = json.loads(frames[-1].removeprefix("data: "))["error"]
    assert error["code"] == "all_providers_failed"
    assert "first byte" in error["message"]
