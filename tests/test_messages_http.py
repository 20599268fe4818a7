"""The official `anthropic` SDK against a real OLP (`/v1/messages`), in front of both HTTP
provider types: what Claude Code and Anthropic-SDK programs see."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
import yaml
from jsonschema import Draft202012Validator

from olp.accounts.identity import KeyLimits
from olp.accounts.keystore import KeyStore, keys_db_path

from fakes.upstream import FakeUpstream, Hang, Slow, Status, Text, Thinking, ToolCalls
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

WEATHER_TOOL: dict[str, Any] = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
ASK = [{"role": "user", "content": "Say hello"}]
SPEC: dict[str, Any] = yaml.safe_load(
    (Path(__file__).parents[1] / "docs" / "openapi.yaml").read_text(encoding="utf-8")
)


def check(name: str, instance: Any) -> None:
    """`instance` matches docs/openapi.yaml's components/schemas/<name>."""
    Draft202012Validator({**SPEC, "$ref": f"#/components/schemas/{name}"}).validate(instance)


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
def client(olp: ThreadServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=olp.base_url, api_key=OWNER_TOKEN, max_retries=0) as sdk:
        yield sdk


def test_create(client: anthropic.Anthropic, upstream: FakeUpstream, kind: str) -> None:
    upstream.script(Text("Hello there, friend."))
    raw = client.messages.with_raw_response.create(
        model="smart",
        max_tokens=50,
        system="Be brief.",
        messages=[{"role": "user", "content": "Say hello"}],
        stop_sequences=["STOP"],
        extra_body={"temperature": 0.2},  # (the SDK no longer has it as an argument)
    )
    message = raw.parse()
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Hello there, friend."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.role == "assistant" and message.model == "smart"
    assert message.id.startswith("msg_")
    assert message.usage.input_tokens == 12 and message.usage.output_tokens > 0
    assert raw.headers["x-olp-provider-used"] == "up"
    assert raw.headers["x-olp-request-id"].removeprefix("req_") == message.id[4:]
    check("Message", raw.http_response.json())
    sent = upstream.requests[0].json
    assert sent["max_tokens"] == 50 and sent["temperature"] == 0.2
    if kind == "anthropic-http":
        assert sent["system"] == "Be brief."
        assert sent["stop_sequences"] == ["STOP"]
    else:
        assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
        assert sent["stop"] == ["STOP"]


def test_system_blocks_content_blocks_and_cache_breakpoints(
    client: anthropic.Anthropic, upstream: FakeUpstream, kind: str
) -> None:
    mark = {"type": "ephemeral"}
    client.messages.create(
        model="smart",
        max_tokens=20,
        system=[
            {"type": "text", "text": "You are terse.", "cache_control": mark},
            {"type": "text", "text": "Answer in French."},
        ],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is "},
                    {"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}},
                    {"type": "text", "text": "this?", "cache_control": mark},
                ],
            }
        ],
        tools=[{**WEATHER_TOOL, "cache_control": mark}],  # type: ignore[list-item]
    )
    sent = upstream.requests[0].json
    if kind == "anthropic-http":
        # Every breakpoint stays where the client put it.
        assert sent["system"] == [
            {"type": "text", "text": "You are terse.", "cache_control": mark},
            {"type": "text", "text": "Answer in French."},
        ]
        assert sent["messages"][0]["content"] == [
            {"type": "text", "text": "What is "},
            {"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}},
            {"type": "text", "text": "this?", "cache_control": mark},
        ]
        assert sent["tools"][0]["cache_control"] == mark
    else:
        assert [m["content"] for m in sent["messages"][:2]] == [
            "You are terse.",
            "Answer in French.",
        ]
        parts = sent["messages"][2]["content"]
        assert parts[1] == {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}
        assert "cache_control" not in str(sent)


def test_stream(client: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    upstream.script(Text("one two three four", chunks=4))
    with client.messages.stream(model="smart", max_tokens=50, messages=ASK) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) == 4 and "".join(pieces) == "one two three four"
    assert final.content[0].text == "one two three four"  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens == 12 and final.usage.output_tokens == 4


def test_raw_stream_events(olp: ThreadServer, upstream: FakeUpstream) -> None:
    """The event sequence itself, as the Messages API sends it."""
    upstream.script(Text("hi there", chunks=2))
    resp = httpx.post(
        f"{olp.base_url}/v1/messages",
        json={"model": "smart", "max_tokens": 10, "stream": True, "messages": ASK},
        headers={"x-api-key": OWNER_TOKEN, "anthropic-version": "2023-06-01"},
    )
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    names = [line[7:] for line in resp.text.splitlines() if line.startswith("event: ")]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_tools_round_trip(
    client: anthropic.Anthropic, upstream: FakeUpstream, kind: str, stream: bool
) -> None:
    upstream.script(ToolCalls([("get_weather", '{"city": "Paris"}')]), Text("Sunny in Paris."))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    asked: dict[str, Any] = {
        "model": "smart",
        "max_tokens": 100,
        "tools": [WEATHER_TOOL],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    }
    if stream:
        with client.messages.stream(messages=messages, **asked) as s:  # type: ignore[arg-type]
            first = s.get_final_message()
    else:
        first = client.messages.create(messages=messages, **asked)  # type: ignore[arg-type]
    assert first.stop_reason == "tool_use"
    use = first.content[-1]
    assert use.type == "tool_use" and use.name == "get_weather"
    assert use.input == {"city": "Paris"}
    assert use.id
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": use.id,
                    "content": "sunny, 24C",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]
    check("MessagesRequest", {"messages": messages, **asked})
    final = client.messages.create(messages=messages, **asked)  # type: ignore[arg-type]
    assert final.content[0].text == "Sunny in Paris."  # type: ignore[union-attr]
    check("Message", first.model_dump())
    sent = upstream.requests[1].json
    if kind == "anthropic-http":
        assert sent["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
        assert sent["messages"][1]["content"][-1]["type"] == "tool_use"
        assert sent["messages"][2]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": use.id,
            "content": "sunny, 24C",
            "cache_control": {"type": "ephemeral"},
        }
    else:
        assert sent["parallel_tool_calls"] is False
        assert sent["messages"][1]["tool_calls"][0]["id"] == use.id
        assert sent["messages"][2] == {
            "role": "tool",
            "tool_call_id": use.id,
            "content": "sunny, 24C",
        }


def test_count_tokens(client: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    short = client.messages.count_tokens(model="smart", messages=ASK)
    long = client.messages.count_tokens(
        model="smart",
        system="You are a helpful assistant. " * 20,
        messages=ASK,
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert 0 < short.input_tokens < long.input_tokens
    check("InputTokens", short.model_dump())
    assert 150 < long.input_tokens < 400  # ~600 bytes of system prompt, a tool
    assert upstream.calls == 0  # an estimate: no provider is asked


def test_auth_error(olp: ThreadServer) -> None:
    with anthropic.Anthropic(base_url=olp.base_url, api_key="sk-wrong", max_retries=0) as bad:
        with pytest.raises(anthropic.AuthenticationError) as info:
            bad.messages.create(model="smart", max_tokens=5, messages=ASK)
        with pytest.raises(anthropic.AuthenticationError):
            bad.messages.count_tokens(model="smart", messages=ASK)  # type: ignore[arg-type]
    assert info.value.status_code == 401
    check("AnthropicError", info.value.body)
    assert info.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    assert info.value.response.headers["x-olp-request-id"]


def test_bearer_auth_works_too(olp: ThreadServer) -> None:
    with anthropic.Anthropic(base_url=olp.base_url, auth_token=OWNER_TOKEN, max_retries=0) as sdk:
        assert sdk.messages.create(model="smart", max_tokens=5, messages=ASK).content


def test_unknown_model_is_not_found(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="no-such-model", max_tokens=5, messages=ASK)
    assert info.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert "no-such-model" in info.value.body["error"]["message"]  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="no-such-model", messages=ASK)  # type: ignore[arg-type]


def test_bad_body_is_invalid_request(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="smart", max_tokens=5, messages=ASK, extra_body={"temperature": 3}
        )
    check("AnthropicError", info.value.body)
    error = info.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("temperature: must be a number between 0 and 1")
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="smart",
            max_tokens=5,
            messages=[{"role": "robot", "content": "hi"}],  # type: ignore[list-item]
        )
    assert "messages[0].role" in info.value.body["error"]["message"]  # type: ignore[index]


def test_rate_limited_upstream_is_429(client: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    upstream.script(Status(429, {"error": {"message": "slow down"}}, {"retry-after": "30"}))
    with pytest.raises(anthropic.RateLimitError) as info:
        client.messages.create(model="smart", max_tokens=5, messages=ASK)
    assert info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert int(info.value.response.headers["retry-after"]) >= 29
    assert info.value.response.headers["x-olp-fallback-exhausted"] == "up"


def test_overloaded_upstream_is_503(client: anthropic.Anthropic, upstream: FakeUpstream) -> None:
    upstream.script(Status(529, {"error": {"message": "overloaded"}}))
    with pytest.raises(anthropic.InternalServerError) as info:
        client.messages.create(model="smart", max_tokens=5, messages=ASK)
    assert info.value.status_code == 503
    assert info.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_round_trip(
    client: anthropic.Anthropic, upstream: FakeUpstream, kind: str, stream: bool
) -> None:
    """Thinking reaches the client with its signature, and goes back to an Anthropic
    upstream on the next turn as it came; with Claude Code's extra fields and betas."""
    upstream.script(Thinking("Step one. Step two.", "sig-123", "Done."), Text("ok"))
    asked: dict[str, Any] = {
        "model": "smart",
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "extra_headers": {"anthropic-beta": "context-management-2025-06-27,oauth-2025-04-20"},
        "extra_body": {"context_management": {"edits": [{"type": "clear_thinking_20251015"}]}},
    }
    if stream:
        with client.messages.stream(messages=ASK, **asked) as s:  # type: ignore[arg-type]
            first = s.get_final_message()
    else:
        first = client.messages.create(messages=ASK, **asked)  # type: ignore[arg-type]
    thinking, text = first.content
    assert thinking.type == "thinking" and thinking.thinking == "Step one. Step two."
    assert text.type == "text" and text.text == "Done."
    if kind == "anthropic-http":
        assert thinking.signature == "sig-123"
    messages = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": "Go on."},
    ]
    client.messages.create(messages=messages, **asked)  # type: ignore[arg-type]
    first_sent, second = (r.json for r in upstream.requests)
    if kind == "anthropic-http":
        assert first_sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
        assert first_sent["context_management"] == {"edits": [{"type": "clear_thinking_20251015"}]}
        assert upstream.requests[0].headers["anthropic-beta"] == "context-management-2025-06-27"
        assert second["messages"][1]["content"][0] == {
            "type": "thinking",
            "thinking": "Step one. Step two.",
            "signature": "sig-123",
        }
    else:
        # Dropped, as documented: an OpenAI upstream has no such fields.
        assert "thinking" not in first_sent and "context_management" not in first_sent
        assert "anthropic-beta" not in upstream.requests[0].headers
        assert second["messages"][1] == {"role": "assistant", "content": "Done."}


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequence_is_reported(
    client: anthropic.Anthropic, upstream: FakeUpstream, kind: str, stream: bool
) -> None:
    ended = Text("Counting: 1, 2, ", finish_reason="stop_sequence", stop_sequence="3")
    upstream.script(ended if kind == "anthropic-http" else Text("Counting: 1, 2, "))
    asked: dict[str, Any] = {"model": "smart", "max_tokens": 50, "stop_sequences": ["3"]}
    if stream:
        with client.messages.stream(messages=ASK, **asked) as s:  # type: ignore[arg-type]
            message = s.get_final_message()
    else:
        message = client.messages.create(messages=ASK, **asked)  # type: ignore[arg-type]
    if kind == "anthropic-http":
        assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "3")
    else:  # an OpenAI upstream does not say which stop sequence ended the answer
        assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)


def slow_config(upstream: FakeUpstream) -> dict[str, Any]:
    timeouts = {"connect_ms": 1000, "first_byte_ms": 600, "idle_ms": 2000, "total_ms": 5000}
    return {
        "server": {"heartbeat_interval_ms": 100},
        "providers": {
            "up": {
                "type": "anthropic-http",
                "base_url": upstream.base_url,
                "models": ["m"],
                "timeouts": timeouts,
            }
        },
    }


def test_ping_while_the_first_hop_is_slow(tmp_path: Path, upstream: FakeUpstream) -> None:
    upstream.script(Slow(first_byte_delay_s=0.4, text="late but fine"))
    with (
        olp_server(tmp_path, slow_config(upstream)) as olp,
        anthropic.Anthropic(base_url=olp.base_url, api_key=OWNER_TOKEN, max_retries=0) as sdk,
        sdk.messages.with_streaming_response.create(
            model="m", max_tokens=10, messages=ASK, stream=True
        ) as resp,
    ):
        body = resp.read().decode()
    names = [line[7:] for line in body.splitlines() if line.startswith("event: ")]
    assert names[:2] == ["message_start", "ping"]  # the line is open before content
    assert names.index("content_block_start") > 1 and names[-1] == "message_stop"
    assert "late but fine" in "".join(
        json.loads(line[6:])["delta"].get("text", "")
        for line in body.splitlines()
        if line.startswith("data: ") and "content_block_delta" in line
    )


def test_exhaustion_after_the_stream_began_is_an_error_event(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    upstream.script(Hang(3.0))
    with (
        olp_server(tmp_path, slow_config(upstream)) as olp,
        anthropic.Anthropic(base_url=olp.base_url, api_key=OWNER_TOKEN, max_retries=0) as sdk,
        pytest.raises(anthropic.APIStatusError) as info,
        sdk.messages.stream(model="m", max_tokens=10, messages=ASK) as stream,
    ):
        stream.get_final_message()
    check("AnthropicError", info.value.body)
    assert "first byte" in info.value.body["error"]["message"]  # type: ignore[index]


def test_a_member_keys_limit_is_a_rate_limit_error(tmp_path: Path, upstream: FakeUpstream) -> None:
    """A member key in `x-api-key` (what the SDK sends), refused at its limit like on the
    chat route: 429 with Retry-After, in Anthropic's shape."""
    store = KeyStore.open(keys_db_path(tmp_path / "olp-home"))
    key = store.create("alice", limits=KeyLimits(rpm=1)).secret
    store.close()
    config = {"providers": {"up": {"type": "anthropic-http", "base_url": upstream.base_url}}}
    with (
        olp_server(tmp_path, config) as olp,
        anthropic.Anthropic(base_url=olp.base_url, api_key=key, max_retries=0) as sdk,
    ):
        assert sdk.messages.create(model="up/m", max_tokens=5, messages=ASK).content
        with pytest.raises(anthropic.RateLimitError) as info:
            sdk.messages.create(model="up/m", max_tokens=5, messages=ASK)
    check("AnthropicError", info.value.body)
    assert int(info.value.response.headers["retry-after"]) > 0
    assert "limit" in info.value.body["error"]["message"]  # type: ignore[index]
    assert upstream.calls == 1


def test_a_repeat_is_served_from_the_cache_in_both_forms(
    client: anthropic.Anthropic, upstream: FakeUpstream
) -> None:
    upstream.script(Text("cached words", chunks=2))
    # Deterministic (temperature 0), as a cached answer must be (docs/cache.md).
    asked: dict[str, Any] = {
        "model": "smart",
        "max_tokens": 20,
        "messages": ASK,
        "extra_body": {"temperature": 0},
    }
    first = client.messages.with_raw_response.create(**asked)
    again = client.messages.with_raw_response.create(**asked)
    with client.messages.with_streaming_response.create(stream=True, **asked) as streamed:
        cache = streamed.headers["x-olp-cache"]
    with client.messages.stream(**asked) as stream:
        final = stream.get_final_message()
    assert (first.headers["x-olp-cache"], again.headers["x-olp-cache"], cache) == (
        "miss",
        "hit",
        "hit",
    )
    assert again.parse().content[0].text == "cached words"  # type: ignore[union-attr]
    assert final.content[0].text == "cached words"  # type: ignore[union-attr]
    assert upstream.calls == 1
