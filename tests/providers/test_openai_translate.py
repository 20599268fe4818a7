"""openai-http translation, pure: IR → Chat Completions body, and answers → IR events."""

from __future__ import annotations

from types import MappingProxyType

import orjson
import pytest

from olp.errors import Failure, ProviderError
from olp.ir import (
    ChatRequest,
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
from olp.providers.openai_http.translate import (
    StreamParser,
    build_payload,
    encode_payload,
    events_from_response,
    usage_from,
)


def req(*messages: Message, **kw: object) -> ChatRequest:
    return ChatRequest(model="gpt-x", messages=messages or (Message("user", "hi"),), **kw)  # type: ignore[arg-type]


# -- requests -------------------------------------------------------------------------


def test_minimal_request_has_only_what_was_given() -> None:
    assert build_payload(req()) == {
        "model": "gpt-x",
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_streaming_always_asks_for_usage() -> None:
    body = build_payload(req(stream=True))
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_messages_translate_faithfully() -> None:
    body = build_payload(
        req(
            Message("system", "be brief"),
            Message("developer", "dev note"),
            Message("user", (TextPart("look"), ImagePart("https://x/cat.png", "high")), name="ann"),
            Message("assistant", None, tool_calls=(ToolCall("c1", "get", '{"a":1}'),)),
            Message("tool", "42", tool_call_id="c1"),
        )
    )
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "developer", "content": "dev note"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "high"}},
            ],
            "name": "ann",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get", "arguments": '{"a":1}'},
                }
            ],
        },
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
    ]


def test_image_without_detail_has_no_detail_key() -> None:
    body = build_payload(req(Message("user", (ImagePart("data:image/png;base64,AAAA"),))))
    assert body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    ]


def test_tools_and_options() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    body = build_payload(
        req(
            tools=(Tool("search", "find things", schema, strict=True), Tool("noop")),
            tool_choice=NamedToolChoice("search"),
            parallel_tool_calls=False,
            response_format=ResponseFormat("json_schema", {"name": "r", "schema": schema}),
            temperature=1.5,
            top_p=0.9,
            max_tokens=100,
            stop=("END",),
            seed=7,
            user="u-1",
        )
    )
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "find things",
                "parameters": schema,
                "strict": True,
            },
        },
        {"type": "function", "function": {"name": "noop"}},
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "search"}}
    assert body["parallel_tool_calls"] is False
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "r", "schema": schema},
    }
    # OpenAI's own range is 0..2: no clamping here.
    assert body["temperature"] == 1.5
    assert body["top_p"] == 0.9
    assert body["max_tokens"] == 100
    assert body["stop"] == ["END"]
    assert body["seed"] == 7
    assert body["user"] == "u-1"


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_string_tool_choice_passes_as_is(choice: str) -> None:
    body = build_payload(req(tools=(Tool("t"),), tool_choice=choice))
    assert body["tool_choice"] == choice


def test_json_object_format() -> None:
    body = build_payload(req(response_format=ResponseFormat("json_object")))
    assert body["response_format"] == {"type": "json_object"}


def test_max_tokens_keeps_the_clients_field_name() -> None:
    body = build_payload(req(max_tokens=50, max_tokens_field="max_completion_tokens"))
    assert body["max_completion_tokens"] == 50
    assert "max_tokens" not in body


def test_extra_passes_through_but_never_overrides_interpreted_fields() -> None:
    body = build_payload(
        req(
            temperature=0.2,
            extra={"frequency_penalty": 0.5, "logit_bias": {"1": 2}, "temperature": 9},
        )
    )
    assert body["frequency_penalty"] == 0.5
    assert body["logit_bias"] == {"1": 2}
    assert body["temperature"] == 0.2


def test_encode_handles_read_only_mappings() -> None:
    schema = MappingProxyType({"type": "object"})
    encoded = encode_payload(build_payload(req(tools=(Tool("t", parameters=schema),))))
    assert orjson.loads(encoded)["tools"][0]["function"]["parameters"] == {"type": "object"}


# -- whole answers --------------------------------------------------------------------


def answer(
    message: dict[str, object], finish: object = "stop", usage: object = None
) -> dict[str, object]:
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


def test_text_answer_with_usage_details() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    events = events_from_response(
        "p", answer({"content": "hi", "reasoning_content": "hmm"}, usage=usage)
    )
    assert events == [
        ReasoningDelta("hmm"),
        TextDelta("hi"),
        Usage(100, 20, cached_prompt_tokens=64, reasoning_tokens=5),
        Finish("stop"),
    ]


def test_tool_call_answer() -> None:
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "a", "arguments": '{"x":1}'}},
        {"id": "c2", "type": "function", "function": {"name": "b", "arguments": {"y": 2}}},
    ]
    events = events_from_response("p", answer({"content": None, "tool_calls": calls}, "tool_calls"))
    built = ResponseBuilder().extend(events).build()
    assert built.tool_calls == (ToolCall("c1", "a", '{"x":1}'), ToolCall("c2", "b", '{"y":2}'))
    assert built.finish_reason == "tool_calls"
    assert built.text is None


@pytest.mark.parametrize(
    ("upstream", "tools", "expected"),
    [
        ("stop", False, "stop"),
        ("length", False, "length"),
        ("content_filter", False, "content_filter"),
        ("tool_calls", True, "tool_calls"),
        ("function_call", True, "tool_calls"),
        ("eos", False, "stop"),
        (None, False, "stop"),
        # Servers that say "stop" after calling tools: clients key on tool_calls.
        ("stop", True, "tool_calls"),
    ],
)
def test_finish_reasons(upstream: object, tools: bool, expected: str) -> None:
    message: dict[str, object] = {"content": "x"}
    if tools:
        message["tool_calls"] = [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]
    assert events_from_response("p", answer(message, upstream))[-1] == Finish(expected)  # type: ignore[arg-type]


def test_error_document_raises_classified() -> None:
    doc = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}}
    with pytest.raises(ProviderError) as info:
        events_from_response("p", doc)
    assert info.value.failure is Failure.QUOTA_EXHAUSTED
    assert info.value.provider == "p"


@pytest.mark.parametrize("doc", [[], {"choices": []}, {"id": "x"}, "text"])
def test_answers_without_choices_are_upstream_errors(doc: object) -> None:
    with pytest.raises(ProviderError, match="malformed response from upstream") as info:
        events_from_response("p", doc)
    assert info.value.failure is Failure.UPSTREAM_ERROR


def test_usage_variants() -> None:
    assert usage_from({"prompt_tokens": 10, "prompt_cache_hit_tokens": 4}) == Usage(10, 0, 4)
    assert usage_from({"prompt_tokens": 1, "completion_tokens": 2, "cost": 0.25}) == Usage(
        1, 2, cost_usd=0.25
    )
    assert usage_from(None) is None


# -- streams --------------------------------------------------------------------------


def chunk(delta: dict[str, object] | None = None, finish: str | None = None, **top: object) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return orjson.dumps({"object": "chat.completion.chunk", "choices": choices, **top}).decode()


def feed_all(*data: str) -> tuple[list[object], StreamParser]:
    parser = StreamParser("p")
    events: list[object] = []
    for d in data:
        events.extend(parser.feed(d))
    return events, parser


def test_stream_text_holds_finish_until_done_and_puts_usage_before_it() -> None:
    events, parser = feed_all(
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "think"}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, "stop"),
        chunk(None, usage={"prompt_tokens": 3, "completion_tokens": 2}),
    )
    # The role-only chunk's empty content must not count as content.
    assert events == [ReasoningDelta("think"), TextDelta("Hel"), TextDelta("lo")]
    assert not parser.done
    assert parser.feed("[DONE]") == [Usage(3, 2), Finish("stop")]
    assert parser.done


def test_stream_reasoning_field_alias() -> None:
    events, _ = feed_all(chunk({"reasoning": "r"}))
    assert events == [ReasoningDelta("r")]


def test_stream_tool_calls() -> None:
    first = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "get", "arguments": ""},
    }
    events, parser = feed_all(
        chunk({"tool_calls": [first]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "put"}}]}),
        chunk({}, "tool_calls"),
    )
    assert events[:2] == [ToolCallDelta(0, "c1", "get", ""), ToolCallDelta(0, None, None, '{"a":')]
    events.extend(parser.feed("[DONE]"))
    built = ResponseBuilder().extend(events).build()  # type: ignore[arg-type]
    assert built.tool_calls == (ToolCall("c1", "get", '{"a":1}'), ToolCall("c2", "put", ""))
    assert built.finish_reason == "tool_calls"


def test_stream_tool_calls_without_index_use_position() -> None:
    calls = [
        {"id": "a", "function": {"name": "f", "arguments": "{}"}},
        {"id": "b", "function": {"name": "g", "arguments": "{}"}},
    ]
    events, _ = feed_all(chunk({"tool_calls": calls}))
    assert [e.index for e in events] == [0, 1]  # type: ignore[attr-defined]


def test_stream_done_without_finish_reason_defaults() -> None:
    _, parser = feed_all(chunk({"content": "x"}))
    assert parser.feed("[DONE]") == [Finish("stop")]


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        ({"message": "quota", "type": "insufficient_quota"}, Failure.QUOTA_EXHAUSTED),
        ({"message": "slow down", "code": "rate_limit_exceeded"}, Failure.RATE_LIMITED),
        ({"message": "busy", "type": "overloaded_error"}, Failure.OVERLOADED),
        ({"message": "oops", "type": "server_error"}, Failure.UPSTREAM_ERROR),
        ({"message": "what"}, Failure.UPSTREAM_ERROR),
        ("plain string error", Failure.UPSTREAM_ERROR),
    ],
)
def test_stream_error_frame(error: object, failure: Failure) -> None:
    parser = StreamParser("p")
    assert parser.feed(chunk({"content": "partial"})) == [TextDelta("partial")]
    with pytest.raises(ProviderError) as info:
        parser.feed(orjson.dumps({"error": error}).decode())
    assert info.value.failure is failure
    assert info.value.message.startswith("upstream error: ")


def test_stream_malformed_json() -> None:
    with pytest.raises(ProviderError, match="malformed response from upstream") as info:
        StreamParser("p").feed("{not json")
    assert info.value.failure is Failure.UPSTREAM_ERROR
