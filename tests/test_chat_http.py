"""The official `openai` SDK against a real OLP, in front of both HTTP provider types."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fakes.upstream import FakeUpstream, Slow, Text, ToolCalls
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(params=["openai-http", "anthropic-http"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def olp(tmp_path: Path, upstream: FakeUpstream, kind: str) -> Iterator[ThreadServer]:
    base = upstream.openai_base_url if kind == "openai-http" else upstream.base_url
    config = {
        "providers": {
            "up": {"type": kind, "base_url": base, "api_key_env": "UP_KEY", "models": ["model-a"]}
        },
        "routing": {"chains": {"smart": [{"provider": "up", "model": "model-a"}]}},
    }
    with olp_server(tmp_path, config, {"UP_KEY": "sk-upstream"}) as server:
        yield server


@pytest.fixture
def client(olp: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{olp.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)


def test_plain_answer(client: openai.OpenAI, upstream: FakeUpstream, kind: str) -> None:
    upstream.script(Text("Hello there, friend."))
    done = client.chat.completions.create(
        model="smart",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Say hello"},
        ],
        temperature=0.2,
        max_tokens=50,
    )
    assert done.choices[0].message.content == "Hello there, friend."
    assert done.choices[0].finish_reason == "stop"
    assert done.model == "smart"
    assert done.usage is not None and done.usage.completion_tokens > 0
    sent = upstream.requests[0]
    assert sent.json["max_tokens"] == 50
    if kind == "anthropic-http":
        assert sent.json["system"] == "Be brief."
        assert sent.headers["x-api-key"] == "sk-upstream"
    else:
        assert sent.json["messages"][0] == {"role": "system", "content": "Be brief."}
        assert sent.headers["authorization"] == "Bearer sk-upstream"


def test_streamed_token_by_token(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.script(Text("one two three four", chunks=4))
    stream = client.chat.completions.create(
        model="smart",
        messages=[{"role": "user", "content": "count"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) >= 4
    assert "".join(pieces) == "one two three four"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]


def test_stream_arrives_as_the_upstream_writes(olp: ThreadServer, upstream: FakeUpstream) -> None:
    """Real streaming: the first token reaches the client long before the last is written."""
    # Chunks 0.5 s apart: more than a busy machine stalls this client thread.
    upstream.script(Slow(first_byte_delay_s=0.0, chunk_delay_s=0.5))
    started = time.perf_counter()
    first_at = None
    with httpx.stream(
        "POST",
        f"{olp.base_url}/v1/chat/completions",
        json={"model": "smart", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        timeout=10,
    ) as resp:
        for line in resp.iter_lines():
            if first_at is None and '"content"' in line:
                first_at = time.perf_counter() - started
        total = time.perf_counter() - started
    assert first_at is not None
    assert total - first_at > 0.5


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls(client: openai.OpenAI, upstream: FakeUpstream, kind: str, stream: bool) -> None:
    upstream.script(
        ToolCalls([("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Oslo"}')])
    )
    messages: Any = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
    if stream:
        calls: dict[int, dict[str, str]] = {}
        finish = None
        for chunk in client.chat.completions.create(
            model="smart",
            messages=messages,
            tools=[WEATHER_TOOL],
            stream=True,  # type: ignore[list-item]
        ):
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "args": ""})
                call["id"] += delta.id or ""
                if delta.function:
                    call["name"] += delta.function.name or ""
                    call["args"] += delta.function.arguments or ""
        got = [(c["name"], json.loads(c["args"])) for _, c in sorted(calls.items())]
        assert all(c["id"] for c in calls.values())
    else:
        done = client.chat.completions.create(
            model="smart",
            messages=messages,
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
        )
        finish = done.choices[0].finish_reason
        got = [
            (c.function.name, json.loads(c.function.arguments))
            for c in done.choices[0].message.tool_calls or []
        ]  # type: ignore[union-attr]
    assert got == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})]
    assert finish == "tool_calls"
    sent = upstream.requests[0].json
    if kind == "anthropic-http":
        assert sent["tools"][0]["name"] == "get_weather"
        assert sent["tools"][0]["input_schema"]["required"] == ["city"]
    else:
        assert sent["tools"][0]["function"]["name"] == "get_weather"


def test_tool_result_round_trip(client: openai.OpenAI, upstream: FakeUpstream, kind: str) -> None:
    upstream.script(Text("It is sunny in Paris."))
    done = client.chat.completions.create(
        model="smart",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24C"},
        ],
    )
    assert done.choices[0].message.content == "It is sunny in Paris."
    sent = upstream.requests[0].json["messages"]
    if kind == "anthropic-http":
        assert sent[1]["content"][0] == {
            "type": "tool_use",
            "id": "call_1",
            "name": "get_weather",
            "input": {"city": "Paris"},
        }
        assert sent[2]["role"] == "user"
        assert sent[2]["content"][0]["type"] == "tool_result"
        assert sent[2]["content"][0]["tool_use_id"] == "call_1"
    else:
        assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24C"}


def test_image_parts_reach_the_upstream(
    client: openai.OpenAI, upstream: FakeUpstream, kind: str
) -> None:
    pixel = "data:image/png;base64,iVBORw0KGgo="
    client.chat.completions.create(
        model="smart",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": pixel}},
                ],
            }
        ],
    )
    content = upstream.requests[0].json["messages"][0]["content"]
    if kind == "anthropic-http":
        image = next(p for p in content if p["type"] == "image")
        assert image["source"] == {
            "type": "base64",
            "media_type": "image/png",
            "data": "iVBORw0KGgo=",
        }
    else:
        assert content[1] == {"type": "image_url", "image_url": {"url": pixel}}


def test_direct_provider_address_and_declared_model(
    client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    client.chat.completions.create(
        model="up/another-model", messages=[{"role": "user", "content": "x"}]
    )
    client.chat.completions.create(model="model-a", messages=[{"role": "user", "content": "x"}])
    assert [r.json["model"] for r in upstream.requests] == ["another-model", "model-a"]


def test_models_lists_chains_and_declared_models(client: openai.OpenAI) -> None:
    ids = {m.id for m in client.models.list()}
    assert {"smart", "model-a"} <= ids


def test_every_chat_response_has_olp_headers(olp: ThreadServer, upstream: FakeUpstream) -> None:
    ok = httpx.post(
        f"{olp.base_url}/v1/chat/completions",
        json={"model": "smart", "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
    )
    bad = httpx.post(
        f"{olp.base_url}/v1/chat/completions",
        json={"model": "smart"},
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
    )
    for resp in (ok, bad):
        for name in (
            "x-olp-provider-used",
            "x-olp-model-used",
            "x-olp-fallback-hops",
            "x-olp-cache",
            "x-olp-latency-ms",
            "x-olp-request-id",
            "x-request-id",
        ):
            assert name in resp.headers, (resp.status_code, name)
        assert resp.headers["x-request-id"] == resp.headers["x-olp-request-id"]
    assert ok.headers["x-olp-provider-used"] == "up"
    assert bad.headers["x-olp-provider-used"] == "none"
