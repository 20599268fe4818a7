"""`POST /v1/responses` end to end: the openai SDK's Responses API against a real OLP whose
hop is a fake upstream speaking OpenAI's Chat Completions or Anthropic's Messages API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pydantic
import pytest

from fakes.upstream import FakeUpstream, Hang, Text, ToolCalls
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

WEATHER_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(params=["openai-http", "anthropic-http"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def olp(tmp_path: Path, upstream: FakeUpstream, kind: str) -> Iterator[ThreadServer]:
    base = upstream.openai_base_url if kind == "openai-http" else upstream.base_url
    config = {
        "providers": {"up": {"type": kind, "base_url": base, "models": ["model-a"]}},
        "routing": {"chains": {"smart": [{"provider": "up", "model": "model-a"}]}},
    }
    with olp_server(tmp_path, config) as server:
        yield server


@pytest.fixture
def client(olp: ThreadServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{olp.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0) as sdk:
        yield sdk


def sent(upstream: FakeUpstream) -> dict[str, Any]:
    body: dict[str, Any] = upstream.requests[-1].json
    return body


def test_create(client: openai.OpenAI, upstream: FakeUpstream, kind: str) -> None:
    upstream.script(Text("Paris.", chunks=2))
    raw = client.responses.with_raw_response.create(
        model="smart", instructions="Be brief.", input="Capital of France?", max_output_tokens=64
    )
    response = raw.parse()
    assert response.output_text == "Paris."
    assert response.id.startswith("resp_") and response.status == "completed"
    assert response.usage is not None and response.usage.total_tokens > 0
    assert raw.headers["x-olp-provider-used"] == "up"
    assert raw.headers["x-request-id"] == raw.headers["x-olp-request-id"]
    body = sent(upstream)
    assert body["model"] == "model-a"
    if kind == "anthropic-http":
        assert body["system"] == "Be brief."
        assert body["max_tokens"] == 64
    else:
        assert body["messages"][0] == {"role": "system", "content": "Be brief."}
        assert body["max_completion_tokens"] == 64


def test_stream(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.script(Text("one two three", chunks=3))
    with client.responses.stream(model="smart", input="Count to three") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) >= 2 and "".join(deltas) == "one two three"
    assert final.output_text == "one two three"
    assert final.usage is not None


@pytest.mark.parametrize("streaming", [False, True])
def test_function_call_round_trip(
    client: openai.OpenAI, upstream: FakeUpstream, kind: str, streaming: bool
) -> None:
    upstream.script(ToolCalls([("get_weather", '{"city": "Paris"}')]), Text("Sunny in Paris."))
    if streaming:
        with client.responses.stream(
            model="smart", input="Weather in Paris?", tools=[WEATHER_TOOL]
        ) as stream:
            first = stream.get_final_response()
    else:
        first = client.responses.create(
            model="smart", input="Weather in Paris?", tools=[WEATHER_TOOL]
        )
    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    history: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        *[c.model_dump(exclude_none=True) for c in calls],
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
    ]
    second = client.responses.create(model="smart", input=history, tools=[WEATHER_TOOL])
    assert second.output_text == "Sunny in Paris."
    body = sent(upstream)
    if kind == "anthropic-http":
        tool_use = body["messages"][1]["content"][-1]
        result = body["messages"][2]["content"][0]
        assert tool_use["type"] == "tool_use" and tool_use["input"] == {"city": "Paris"}
        assert result["type"] == "tool_result" and result["tool_use_id"] == tool_use["id"]
    else:
        assert body["messages"][1]["tool_calls"][0]["id"] == calls[0].call_id
        assert body["messages"][2] == {
            "role": "tool",
            "content": "sunny",
            "tool_call_id": calls[0].call_id,
        }


def test_structured_output(client: openai.OpenAI, upstream: FakeUpstream, kind: str) -> None:
    class City(pydantic.BaseModel):
        name: str

    if kind == "anthropic-http":  # a forced tool call named after the schema
        upstream.script(ToolCalls([("City", '{"name": "Paris"}')]))
    else:
        upstream.script(Text('{"name": "Paris"}'))
    parsed = client.responses.parse(model="smart", input="A city", text_format=City)
    assert parsed.output_parsed == City(name="Paris")


def test_hosted_tools_are_refused_by_name(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="smart", input="x", tools=[{"type": "web_search"}])
    assert "web_search" in caught.value.message
    assert caught.value.body is not None
    with pytest.raises(openai.BadRequestError) as stateful:
        client.responses.create(model="smart", input="x", previous_response_id="resp_1")
    assert "previous_response_id" in stateful.value.message
    assert upstream.calls == 0


def test_unknown_model_and_missing_key(olp: ThreadServer) -> None:
    url = f"{olp.base_url}/v1/responses"
    body = {"model": "nope", "input": "x"}
    missing = httpx.post(url, json=body, headers={"authorization": f"Bearer {OWNER_TOKEN}"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert httpx.post(url, json=body).status_code == 401


def test_failure_after_the_start_is_response_failed(
    tmp_path: Path, upstream: FakeUpstream, kind: str
) -> None:
    """The heartbeat sent the headers (and response.created); then the chain is exhausted."""
    upstream.script(Hang(3.0))
    base = upstream.openai_base_url if kind == "openai-http" else upstream.base_url
    config = {
        "server": {"heartbeat_interval_ms": 100},
        "providers": {
            "up": {
                "type": kind,
                "base_url": base,
                "models": ["model-a"],
                "timeouts": {"first_byte_ms": 400},
            }
        },
    }
    with (
        olp_server(tmp_path, config) as server,
        openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0) as sdk,
    ):
        events = list(sdk.responses.create(model="model-a", input="x", stream=True))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.error is not None
    assert failed.response.error.code == "server_error"
