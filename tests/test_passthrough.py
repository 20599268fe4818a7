"""Fields OLP does not know (a server's own sampling options) reach an OpenAI-compatible
upstream as the client sent them, are part of the cache key, and go nowhere else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from olp.cache import request_fingerprint
from olp.wire.openai_chat import parse_chat_request

from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

VLLM_OPTIONS: dict[str, Any] = {
    "top_k": 20,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
    "chat_template_kwargs": {"enable_thinking": False},
}


def config(upstream: FakeUpstream, kind: str) -> dict[str, Any]:
    base = upstream.openai_base_url if kind == "openai-http" else upstream.base_url
    return {"providers": {"up": {"type": kind, "base_url": base, "models": ["m"]}}}


def chat(server: ThreadServer, **fields: Any) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        json=body,
        timeout=20,
    )


@pytest.mark.parametrize("stream", [False, True])
def test_unknown_fields_reach_an_openai_compatible_upstream(
    tmp_path: Path, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(Text("ok"))
    with olp_server(tmp_path, config(upstream, "openai-http")) as server:
        assert chat(server, stream=stream, **VLLM_OPTIONS).status_code == 200
    sent = upstream.requests[0].json
    assert {k: sent[k] for k in VLLM_OPTIONS} == VLLM_OPTIONS


def test_unknown_fields_do_not_reach_an_anthropic_upstream(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    upstream.script(Text("ok"))
    with olp_server(tmp_path, config(upstream, "anthropic-http")) as server:
        assert chat(server, **VLLM_OPTIONS).status_code == 200
    sent = upstream.requests[0].json
    assert set(VLLM_OPTIONS).isdisjoint(sent)


def test_an_unknown_null_is_not_given() -> None:
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}],"top_k":null}'
    assert parse_chat_request(body).passthrough is None


def test_unknown_fields_are_part_of_the_cache_key(tmp_path: Path, upstream: FakeUpstream) -> None:
    upstream.script(Text("ok"))
    with olp_server(tmp_path, config(upstream, "openai-http")) as server:
        outcomes = [
            chat(server, temperature=0, top_k=k).headers["x-olp-cache"] for k in (20, 40, 20)
        ]
    assert outcomes == ["miss", "miss", "hit"]
    assert [r.json["top_k"] for r in upstream.requests] == [20, 40]


def test_the_fingerprint_sees_unknown_fields() -> None:
    def fingerprint(extra: str) -> bytes:
        body = '{"model":"m","messages":[{"role":"user","content":"x"}]' + extra + "}"
        return request_fingerprint(parse_chat_request(body.encode()))

    assert fingerprint("") != fingerprint(',"min_p":0.1') != fingerprint(',"min_p":0.2')
