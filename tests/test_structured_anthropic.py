"""`response_format` over an `anthropic-http` hop: a forced tool call whose input is the
answer, validated, and returned as plain JSON text (what the openai SDK's `parse` needs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pydantic
import pytest

from fakes.upstream import FakeUpstream, Text, ToolCalls
from olp_server import OWNER_TOKEN, ThreadServer, olp_server


class Weather(pydantic.BaseModel):
    city: str
    temp_c: int


ASK = [{"role": "user", "content": "Weather in Paris, as JSON"}]


@pytest.fixture
def olp(tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream) -> Iterator[ThreadServer]:
    config = {
        "providers": {
            "claude": {"type": "anthropic-http", "base_url": alpha.base_url, "models": ["c"]},
            "backup": {"type": "openai-http", "base_url": beta.openai_base_url, "models": ["b"]},
        },
        "routing": {
            "chains": {
                "smart": [{"provider": "claude", "model": "c"}],
                "safe": [
                    {"provider": "claude", "model": "c"},
                    {"provider": "backup", "model": "b"},
                ],
            }
        },
        "cache": {"enabled": False},
    }
    with olp_server(tmp_path, config) as server:
        yield server


@pytest.fixture
def client(olp: ThreadServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{olp.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0) as sdk:
        yield sdk


def test_parse_gets_the_forced_tool_calls_input(client: openai.OpenAI, alpha: FakeUpstream) -> None:
    alpha.script(ToolCalls([("Weather", '{"city": "Paris", "temp_c": 24}')]))
    done = client.chat.completions.parse(model="smart", messages=ASK, response_format=Weather)
    message = done.choices[0].message
    assert message.parsed == Weather(city="Paris", temp_c=24)
    assert json.loads(message.content or "") == {"city": "Paris", "temp_c": 24}
    assert done.choices[0].finish_reason == "stop"
    assert not message.tool_calls
    sent = alpha.requests[0].json
    [tool] = sent["tools"]
    assert tool["name"] == "Weather"
    assert tool["input_schema"]["required"] == ["city", "temp_c"]
    assert sent["tool_choice"] == {"type": "tool", "name": "Weather"}
    assert "system" not in sent  # no prose instruction


def test_streamed_json_object(client: openai.OpenAI, alpha: FakeUpstream) -> None:
    alpha.script(ToolCalls([("json_answer", '{"answer": 42}')], chunks=3))
    chunks = list(
        client.chat.completions.create(
            model="smart",
            messages=ASK,
            stream=True,
            response_format={"type": "json_object"},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert json.loads(text) == {"answer": 42}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert alpha.requests[0].json["tool_choice"] == {"type": "tool", "name": "json_answer"}


def test_an_answer_off_the_schema_falls_back(
    olp: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    for _ in range(2):  # once whole, once streamed
        alpha.script(ToolCalls([("Weather", '{"city": "Paris"}')]))  # temp_c is missing
        beta.script(Text('{"city": "Paris", "temp_c": 21}'))
    expected = Weather(city="Paris", temp_c=21)
    with openai.OpenAI(base_url=f"{olp.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0) as sdk:
        raw = sdk.chat.completions.with_raw_response.parse(
            model="safe", messages=ASK, response_format=Weather
        )
        with sdk.chat.completions.stream(model="safe", messages=ASK, response_format=Weather) as s:
            assert s.get_final_completion().choices[0].message.parsed == expected
    assert raw.parse().choices[0].message.parsed == expected
    assert raw.headers["x-olp-provider-used"] == "backup"
    detail = json.loads(raw.headers["x-olp-fallback-detail"])
    assert "temp_c" in detail[0]["message"] and "does not match" in detail[0]["message"]
    assert alpha.calls == beta.calls == 2


def test_client_tools_keep_the_prose_instruction(
    client: openai.OpenAI, alpha: FakeUpstream
) -> None:
    tool: Any = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    client.chat.completions.create(
        model="smart", messages=ASK, tools=[tool], response_format={"type": "json_object"}
    )
    sent = alpha.requests[0].json
    assert [t["name"] for t in sent["tools"]] == ["f"]
    assert "single valid JSON object" in sent["system"]


def test_an_invalid_schema_is_a_400(client: openai.OpenAI, alpha: FakeUpstream) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="smart",
            messages=ASK,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "w", "schema": {"type": "object", "required": 5}},
            },
        )
    assert "response_format.json_schema.schema" in str(info.value)
    assert alpha.calls == 0
