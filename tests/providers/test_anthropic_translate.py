"""anthropic-http translation, pure: IR → Messages API body, and answers → IR events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from olp.errors import Failure, ProviderError
from olp.ir import (
    ChatRequest,
    Event,
    Finish,
    ImagePart,
    Message,
    NamedToolChoice,
    ReasoningDelta,
    ResponseBuilder,
    ResponseFormat,
    TextDelta,
    TextPart,
    Tool,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from olp.providers.anthropic_http.events import StreamParser, events_from_response
from olp.providers.anthropic_http.translate import DEFAULT_MAX_TOKENS, build_payload


def req(*messages: Message, **kw: Any) -> ChatRequest:
    return ChatRequest(model="claude-x", messages=messages or (Message("user", "hi"),), **kw)


def build(*messages: Message, **kw: Any) -> dict[str, Any]:
    return build_payload("haiku", req(*messages, **kw))


# -- requests -------------------------------------------------------------------------


def test_minimal_request_gets_the_default_max_tokens() -> None:
    assert build() == {
        "model": "claude-x",
        "max_tokens": DEFAULT_MAX_TOKENS,
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_system_and_developer_messages_become_system() -> None:
    body = build(
        Message("system", "be brief"),
        Message("user", "hi"),
        Message("developer", (TextPart("use "), TextPart("metric"))),
    )
    assert body["system"] == "be brief\n\nuse metric"
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_response_format_becomes_a_system_instruction_with_the_schema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    body = build(
        Message("system", "sys"),
        response_format=ResponseFormat("json_schema", {"name": "num", "schema": schema}),
    )
    assert body["system"].startswith("sys\n\n")
    assert "JSON Schema (named 'num')" in body["system"]
    assert orjson.dumps(schema).decode() in body["system"]
    plain = build(response_format=ResponseFormat("json_object"))
    assert "single valid JSON object" in plain["system"]
    assert "system" not in build(response_format=ResponseFormat("text"))


def test_consecutive_same_role_messages_merge() -> None:
    body = build(Message("user", "a"), Message("user", "b"), Message("assistant", "c"))
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "c"}]},
    ]


def test_images() -> None:
    body = build(
        Message(
            "user",
            (
                TextPart("what is this"),
                ImagePart("data:image/png;base64,iVBORw0KGgo="),
                ImagePart("https://example.com/cat.jpg", "high"),
            ),
        )
    )
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "what is this"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


@pytest.mark.parametrize("url", ["data:image/png,rawbytes", "data:;base64,AAAA", "ftp://x/y.png"])
def test_unusable_image_urls_are_invalid_requests(url: str) -> None:
    with pytest.raises(ProviderError) as info:
        build(Message("user", "x"), Message("user", (ImagePart(url),)))
    assert info.value.failure is Failure.INVALID_REQUEST
    assert info.value.param == "messages[1].content[0].image_url"


def test_tool_round_trip() -> None:
    body = build(
        Message("user", "weather?"),
        Message(
            "assistant",
            "checking",
            tool_calls=(ToolCall("t1", "weather", '{"city":"Oslo"}'), ToolCall("t2", "time", "")),
        ),
        Message("tool", "cold", tool_call_id="t1"),
        Message("tool", (TextPart("noon"),), tool_call_id="t2"),
        Message("user", "thanks"),
    )
    assert body["messages"] == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "t2", "name": "time", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "cold"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [{"type": "text", "text": "noon"}],
                },
                {"type": "text", "text": "thanks"},
            ],
        },
    ]


def test_tool_results_go_first_in_a_merged_user_turn() -> None:
    body = build(
        Message("assistant", None, tool_calls=(ToolCall("t1", "f", "{}"),)),
        Message("user", "also this"),
        Message("tool", "done", tool_call_id="t1"),
    )
    assert [b["type"] for b in body["messages"][1]["content"]] == ["tool_result", "text"]


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]"])
def test_bad_tool_arguments_name_the_message(arguments: str) -> None:
    with pytest.raises(ProviderError) as info:
        build(
            Message("user", "x"),
            Message(
                "assistant",
                None,
                tool_calls=(ToolCall("a", "f", "{}"), ToolCall("b", "g", arguments)),
            ),
        )
    error = info.value
    assert error.failure is Failure.INVALID_REQUEST
    assert error.param == "messages[1].tool_calls[1].function.arguments"
    assert "messages[1]" in error.message
    assert error.provider == "haiku"


def test_tools_and_choices() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    body = build(tools=(Tool("search", "find", schema), Tool("noop")), tool_choice="required")
    assert body["tools"] == [
        {"name": "search", "description": "find", "input_schema": schema},
        {"name": "noop", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert body["tool_choice"] == {"type": "any"}


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("none", False, {"type": "none"}),
        ("required", None, {"type": "any"}),
        (NamedToolChoice("t"), None, {"type": "tool", "name": "t"}),
        (
            NamedToolChoice("t"),
            False,
            {"type": "tool", "name": "t", "disable_parallel_tool_use": True},
        ),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, True, None),
        (None, None, None),
    ],
)
def test_tool_choice_mapping(choice: Any, parallel: bool | None, expected: object) -> None:
    body = build(tools=(Tool("t"),), tool_choice=choice, parallel_tool_calls=parallel)
    assert body.get("tool_choice") == expected


def test_no_tool_choice_without_tools() -> None:
    assert "tool_choice" not in build(tool_choice="required")


def test_sampling_and_options() -> None:
    body = build(
        temperature=1.7,
        top_p=0.5,
        max_tokens=99,
        stop=("END", "STOP"),
        user="u-1",
        seed=3,
        stream=True,
        extra={"top_k": 40, "frequency_penalty": 1.0},
    )
    assert body["temperature"] == 1.0  # clamped to Anthropic's range
    assert body["top_p"] == 0.5
    assert body["max_tokens"] == 99
    assert body["stop_sequences"] == ["END", "STOP"]
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["stream"] is True
    assert body["top_k"] == 40
    assert "seed" not in body
    assert "frequency_penalty" not in body
    assert build(temperature=0.3)["temperature"] == 0.3


# -- whole answers --------------------------------------------------------------------


def message(
    content: list[dict[str, Any]], stop: str | None = "end_turn", **usage: int
) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": stop,
        "usage": usage or {"input_tokens": 5, "output_tokens": 2},
    }


def test_whole_answer_with_thinking_text_and_tools() -> None:
    doc = message(
        [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "tu1", "name": "a", "input": {"x": 1}},
            {"type": "tool_use", "id": "tu2", "name": "b", "input": {}},
        ],
        "tool_use",
        input_tokens=10,
        output_tokens=4,
        cache_read_input_tokens=100,
        cache_creation_input_tokens=20,
    )
    assert events_from_response("haiku", doc) == [
        ReasoningDelta("hmm", "sig"),
        TextDelta("Let me look."),
        ToolCallDelta(0, "tu1", "a", '{"x":1}'),
        ToolCallDelta(1, "tu2", "b", "{}"),
        Usage(130, 4, cached_prompt_tokens=100, cache_write_tokens=20),
        Finish("tool_calls"),
    ]


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("something_new", "stop"),
    ],
)
def test_stop_reasons(stop: str, expected: str) -> None:
    doc = message([{"type": "text", "text": "x"}], stop)
    assert events_from_response("haiku", doc)[-1] == Finish(expected)  # type: ignore[arg-type]


def test_error_document_and_malformed_answers() -> None:
    with pytest.raises(ProviderError) as info:
        events_from_response(
            "haiku", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
        )
    assert info.value.failure is Failure.OVERLOADED
    with pytest.raises(ProviderError, match="malformed response") as info:
        events_from_response("haiku", {"type": "message"})
    assert info.value.failure is Failure.UPSTREAM_ERROR


# -- streams --------------------------------------------------------------------------


def sse(kind: str, **fields: Any) -> tuple[str, str]:
    return kind, orjson.dumps({"type": kind, **fields}).decode()


def run(*frames: tuple[str, str]) -> tuple[list[Event], StreamParser]:
    parser = StreamParser("haiku")
    events: list[Event] = []
    for event, data in frames:
        events.extend(parser.feed(event, data))
    return events, parser


START = sse(
    "message_start",
    message={
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "content": [],
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 200,
            "cache_creation_input_tokens": 30,
            "output_tokens": 1,
        },
    },
)


def test_full_stream_with_thinking_text_and_two_tools() -> None:
    events, parser = run(
        START,
        sse("ping"),
        sse("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
        sse("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "plan"}),
        sse("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "s"}),
        sse("content_block_stop", index=0),
        sse("content_block_start", index=1, content_block={"type": "text", "text": ""}),
        sse("content_block_delta", index=1, delta={"type": "text_delta", "text": "On it."}),
        sse("content_block_stop", index=1),
        sse(
            "content_block_start",
            index=2,
            content_block={"type": "tool_use", "id": "tu1", "name": "get", "input": {}},
        ),
        sse("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": ""}),
        sse(
            "content_block_delta",
            index=2,
            delta={"type": "input_json_delta", "partial_json": '{"a":'},
        ),
        sse(
            "content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": "1}"}
        ),
        sse("content_block_stop", index=2),
        sse(
            "content_block_start",
            index=3,
            content_block={"type": "tool_use", "id": "tu2", "name": "now", "input": {}},
        ),
        sse("content_block_stop", index=3),
        sse("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 42}),
    )
    finished_early = parser.done  # a local: mypy would narrow the attribute for good
    assert not finished_early
    # Tool indexes count tool_use blocks (0, 1), not content blocks (2, 3).
    assert events == [
        ReasoningDelta("plan"),
        ReasoningDelta("", signature="s"),  # the block's seal, for an Anthropic client
        TextDelta("On it."),
        ToolCallDelta(0, "tu1", "get", ""),
        ToolCallDelta(0, arguments='{"a":'),
        ToolCallDelta(0, arguments="1}"),
        ToolCallDelta(1, "tu2", "now", ""),
        ToolCallDelta(1, arguments="{}"),  # a call without parameters still gets an object
    ]
    tail = parser.feed("message_stop", '{"type":"message_stop"}')
    assert parser.done
    assert tail == [
        Usage(240, 42, cached_prompt_tokens=200, cache_write_tokens=30),
        Finish("tool_calls"),
    ]
    built = ResponseBuilder().extend(events + tail).build()
    assert built.tool_calls == (ToolCall("tu1", "get", '{"a":1}'), ToolCall("tu2", "now", "{}"))


def test_stream_stop_reason_max_tokens() -> None:
    events, _parser = run(
        START,
        sse("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        sse("content_block_delta", index=0, delta={"type": "text_delta", "text": "cut"}),
        sse("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 3}),
        sse("message_stop"),
    )
    assert events[-1] == Finish("length")
    assert events[-2] == Usage(240, 3, cached_prompt_tokens=200, cache_write_tokens=30)


@pytest.mark.parametrize(
    ("kind", "failure"),
    [
        ("overloaded_error", Failure.OVERLOADED),
        ("rate_limit_error", Failure.RATE_LIMITED),
        ("api_error", Failure.UPSTREAM_ERROR),
        ("authentication_error", Failure.AUTH_FAILED),
        ("invalid_request_error", Failure.INVALID_REQUEST),
        ("billing_error", Failure.QUOTA_EXHAUSTED),
        ("brand_new_error", Failure.UPSTREAM_ERROR),
    ],
)
def test_stream_error_event(kind: str, failure: Failure) -> None:
    parser = StreamParser("haiku")
    parser.feed(*START)
    with pytest.raises(ProviderError) as info:
        parser.feed(*sse("error", error={"type": kind, "message": "nope"}))
    assert info.value.failure is failure
    assert info.value.message == "upstream error: nope"


def test_stream_malformed_data() -> None:
    with pytest.raises(ProviderError, match="malformed response") as info:
        StreamParser("haiku").feed("message_start", "{oops")
    assert info.value.failure is Failure.UPSTREAM_ERROR
