"""`/v1/embeddings` and `/v1/completions` through a real OLP, driven by the official openai
SDK: forwarded to OpenAI-compatible fake upstreams with chains, fallback, keys and the
ledger; a hop that cannot serve the endpoint (a subscription CLI) is skipped."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from fakes.upstream import FakeUpstream, Status, Text
from olp_server import OWNER_TOKEN, ThreadServer, olp_server


def config(alpha: FakeUpstream, beta: FakeUpstream) -> dict[str, Any]:
    return {
        "providers": {
            # A subscription CLI first: it serves neither endpoint, so it is skipped.
            "claude": {"type": "claude-cli", "command": sys.executable},
            "alpha": {"type": "openai-http", "base_url": alpha.openai_base_url},
            "beta": {"type": "openai-http", "base_url": beta.openai_base_url},
        },
        "routing": {
            "chains": {
                "embed": [
                    {"provider": "claude", "model": "sonnet"},
                    {"provider": "alpha", "model": "text-embedding-3-small"},
                    {"provider": "beta", "model": "nomic-embed-text"},
                ],
                "code": [
                    {"provider": "alpha", "model": "codestral"},
                    {"provider": "beta", "model": "qwen2.5-coder"},
                ],
                "cli-only": [{"provider": "claude", "model": "sonnet"}],
            }
        },
        "auth": {"fallback_detail_header_policy": "all"},
    }


@pytest.fixture
def olp(tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream) -> Iterator[ThreadServer]:
    with olp_server(tmp_path, config(alpha, beta)) as server:
        yield server


def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)


def test_embeddings_are_forwarded_with_the_hops_model(
    olp: ThreadServer, alpha: FakeUpstream
) -> None:
    raw = client(olp).embeddings.with_raw_response.create(
        model="embed", input=["hello world", "hi"], dimensions=2
    )
    answer = raw.parse()
    assert [d.embedding for d in answer.data] == [[11.0, 0.5], [2.0, 0.5]]
    assert answer.usage.prompt_tokens == 3
    (request,) = alpha.requests
    assert request.path == "/v1/embeddings"
    assert request.json["model"] == "text-embedding-3-small"  # the hop's model
    assert request.json["dimensions"] == 2  # the rest as the client sent it
    assert raw.headers["x-olp-provider-used"] == "alpha"
    assert raw.headers["x-olp-fallback-hops"] == "1"
    (skipped,) = orjson.loads(raw.headers["x-olp-fallback-detail"])
    assert (skipped["provider"], skipped["code"]) == ("claude", "UNSUPPORTED")


def test_a_failing_hop_falls_back_to_the_next(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    alpha.script(Status(429, headers={"retry-after": "30"}))
    answer = client(olp).embeddings.create(model="embed", input="x")
    assert answer.model == "nomic-embed-text"
    assert beta.calls == 1


def test_fill_in_the_middle_completions_whole_and_streamed(
    olp: ThreadServer, alpha: FakeUpstream
) -> None:
    alpha.script(Text("    return a + b\n"), Text("    return a * b\n"))
    whole = client(olp).completions.create(
        model="code", prompt="def add(a, b):\n", suffix="\n\nprint(add(1, 2))", max_tokens=16
    )
    assert whole.choices[0].text == "    return a + b\n"
    assert whole.usage is not None and whole.usage.completion_tokens == 7
    assert alpha.requests[0].json["suffix"] == "\n\nprint(add(1, 2))"
    stream = client(olp).completions.create(
        model="code",
        prompt="def mul(a, b):\n",
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "    return a * b\n"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 12


def test_the_ledger_counts_forwarded_requests(olp: ThreadServer) -> None:
    client(olp).embeddings.create(model="embed", input="count me")
    olp.call(olp.app.ctx.ledger.flush())
    conn = sqlite3.connect(olp.config.home / "ledger.db")
    try:
        rows = conn.execute(
            "SELECT requested_model, provider, model, prompt_tokens, status FROM ledger_requests"
        ).fetchall()
    finally:
        conn.close()
    assert rows == [("embed", "alpha", "text-embedding-3-small", 2, 200)]


def test_no_hop_that_serves_the_endpoint_is_a_400_naming_it(olp: ThreadServer) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(olp).embeddings.create(model="cli-only", input="x")
    error = info.value.body
    assert isinstance(error, dict) and error["code"] == "unsupported_request"
    assert "`embeddings`" in error["message"]


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/v1/embeddings", {"model": "embed"}, "input: required"),
        ("/v1/embeddings", {"model": "embed", "input": "x", "stream": True}, "not streamed"),
        ("/v1/completions", {"model": "code"}, "prompt: required"),
        ("/v1/completions", {"model": "code\n", "prompt": "x"}, "control characters"),
        ("/v1/completions", {"model": "code", "prompt": "x", "stream": "yes"}, "boolean"),
        ("/v1/embeddings", {"model": "nope", "input": "x"}, "does not exist"),
    ],
)
def test_bad_requests_get_a_clear_openai_error(
    olp: ThreadServer, path: str, body: dict[str, Any], message: str
) -> None:
    resp = httpx.post(
        olp.base_url + path, json=body, headers={"authorization": f"Bearer {OWNER_TOKEN}"}
    )
    assert 400 <= resp.status_code < 500
    assert message in resp.json()["error"]["message"]


def test_a_body_that_is_not_json_is_a_400(olp: ThreadServer) -> None:
    resp = httpx.post(
        olp.base_url + "/v1/embeddings",
        content=b"{not json",
        headers={"authorization": f"Bearer {OWNER_TOKEN}", "content-type": "application/json"},
    )
    assert resp.status_code == 400
    assert "Invalid JSON" in resp.json()["error"]["message"]
