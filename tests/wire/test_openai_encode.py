"""IR -> OpenAI JSON, checked against the official `openai` SDK's own types and parsers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from olp.errors import (
    ChainFailed,
    Failure,
    HopFailure,
    InvalidRequest,
    KeyLimitExceeded,
    OLPError,
    ProviderError,
)
from olp.ir import (
    ChatResponse,
    Event,
    Finish,
    ReasoningDelta,
    ResponseBuilder,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from olp.wire.openai_chat import ChunkEncoder, completion_body, error_body, usage_dict
from olp.wire.sse import SSEDecoder

CID = "chatcmpl-test"
CREATED = 1_700_000_000


def encode_stream(events: Sequence[Event], *, include_usage: bool = False) -> bytes:
    encoder = ChunkEncoder(CID, "gpt-test", CREATED, include_usage)
    return b"".join(encoder.encode(e) for e in events) + encoder.done()


def frames(stream: bytes) -> list[str]:
    """The data of every SSE frame, checking the framing is exact on the way."""
    assert stream.endswith(b"\n\n")
    parts = stream[:-2].split(b"\n\n")
    assert all(p.startswith(b"data: ") for p in parts), parts
    return [p[len(b"data: ") :].decode() for p in parts]


def chunks(stream: bytes) -> list[ChatCompletionChunk]:
    data = frames(stream)
    assert data[-1] == "[DONE]"
    assert "[DONE]" not in data[:-1]
    return [ChatCompletionChunk.model_validate(orjson.loads(d)) for d in data[:-1]]


def sdk_rebuild(stream: bytes) -> Any:
    """What the SDK's own accumulator (used by `client.chat.completions.stream`) builds."""
    state = ChatCompletionStreamState()
    for chunk in chunks(stream):
        state.handle_chunk(chunk)
    return state.get_final_completion()


def calls_of(tool_calls: Sequence[Any] | None) -> list[tuple[str, str, str]]:
    return [(c.id, c.function.name, c.function.arguments) for c in tool_calls or ()]


TOOL_EVENTS: list[Event] = [
    ReasoningDelta("Let me think."),
    TextDelta("Checking "),
    TextDelta("the weather."),
    ToolCallDelta(0, id="call_abc", name="get_weather", arguments=""),
    ToolCallDelta(0, arguments='{"city":'),
    ToolCallDelta(0, arguments='"Paris"}'),
    ToolCallDelta(1, id="call_def", name="get_time", arguments='{"tz":"CET"}'),
    Usage(prompt_tokens=12, completion_tokens=30, cached_prompt_tokens=4, reasoning_tokens=7),
    Finish("tool_calls"),
]


# --- usage and errors ------------------------------------------------------------------


def test_usage_dict_shape() -> None:
    usage = Usage(prompt_tokens=10, completion_tokens=5, cached_prompt_tokens=3, reasoning_tokens=2)
    assert usage_dict(usage) == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 2},
    }


def test_error_body_shape() -> None:
    err = InvalidRequest("temperature: must be a number between 0 and 2", param="temperature")
    assert orjson.loads(error_body(err)) == {
        "error": {
            "message": "temperature: must be a number between 0 and 2",
            "type": "invalid_request_error",
            "code": "invalid_request_error",
            "param": "temperature",
        }
    }


def test_error_body_names_the_provider() -> None:
    err = ProviderError(Failure.AUTH_FAILED, "upstream said 401", provider="alpha")
    body = orjson.loads(error_body(err))["error"]
    assert body == {
        "message": "upstream said 401",
        "type": "provider_error",
        "code": "provider_auth_failed",
        "param": None,
        "provider": "alpha",
    }


def test_error_body_of_chain_failure() -> None:
    shown = ProviderError(Failure.RATE_LIMITED, "slow down", provider="alpha")
    err = ChainFailed(
        (HopFailure(0, "alpha", "m", shown, "fallback"),),
        shown,
        http_status=429,
        code="all_providers_failed",
        retry_after=3.0,
    )
    body = orjson.loads(error_body(err))["error"]
    assert (body["code"], body["provider"], body["message"]) == (
        "all_providers_failed",
        "alpha",
        "slow down",
    )
    assert "retry_after" not in body


@pytest.mark.parametrize(
    "message",
    ['quote " and backslash \\ and newline\n', "lone surrogate \ud800 here", "<b>html</b> ✓"],
)
def test_error_body_is_always_valid_json(message: str) -> None:
    body = orjson.loads(error_body(KeyLimitExceeded(message)))
    assert body["error"]["code"] == "key_limit_exceeded"
    assert body["error"]["message"].startswith(message.split("\ud800")[0])


def test_error_frame_and_keepalive() -> None:
    encoder = ChunkEncoder(CID, "m", CREATED, include_usage=False)
    err = OLPError("boom", provider="p")
    frame = encoder.error_frame(err)
    assert frame == b"data: " + error_body(err) + b"\n\n"
    assert orjson.loads(frame[len(b"data: ") :])["error"]["provider"] == "p"
    assert encoder.keepalive() == b": keepalive\n\n"
    # Through a real SSE decoder, the keepalive is a comment and yields nothing.
    assert SSEDecoder().feed(encoder.keepalive()) == []


# --- streaming chunks ------------------------------------------------------------------


def test_text_stream_frames() -> None:
    stream = encode_stream([TextDelta("Hel"), TextDelta("lo"), Finish("stop")])
    got = chunks(stream)
    assert len(got) == 3
    assert all(c.id == CID and c.created == CREATED and c.model == "gpt-test" for c in got)
    assert all(c.object == "chat.completion.chunk" for c in got)
    assert got[0].choices[0].delta.role == "assistant"
    assert got[1].choices[0].delta.role is None
    assert [c.choices[0].delta.content for c in got] == ["Hel", "lo", None]
    assert [c.choices[0].finish_reason for c in got] == [None, None, "stop"]
    assert orjson.loads(frames(stream)[2])["choices"][0]["delta"] == {}
    assert frames(stream)[-1] == "[DONE]"
    assert all(c.usage is None for c in got)


def test_every_frame_has_the_openai_choice_keys() -> None:
    for data in frames(encode_stream(TOOL_EVENTS))[:-1]:
        choice = orjson.loads(data)["choices"][0]
        assert set(choice) == {"index", "delta", "logprobs", "finish_reason"}
        assert choice["index"] == 0


def test_tool_call_frames_follow_openai() -> None:
    data = [orjson.loads(d) for d in frames(encode_stream(TOOL_EVENTS))[:-1]]
    calls = [d["choices"][0]["delta"]["tool_calls"][0] for d in data[3:7]]
    assert calls[0] == {
        "index": 0,
        "id": "call_abc",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    # Later pieces carry only the index and the arguments.
    assert calls[1] == {"index": 0, "function": {"arguments": '{"city":'}}
    assert calls[2] == {"index": 0, "function": {"arguments": '"Paris"}'}}
    assert calls[3]["id"] == "call_def"
    assert data[0]["choices"][0]["delta"] == {
        "role": "assistant",
        "reasoning_content": "Let me think.",
    }


def test_sdk_accumulator_rebuilds_text_tools_and_usage() -> None:
    completion = sdk_rebuild(encode_stream(TOOL_EVENTS, include_usage=True))
    message = completion.choices[0].message
    assert message.role == "assistant"
    assert message.content == "Checking the weather."
    assert calls_of(message.tool_calls) == [
        ("call_abc", "get_weather", '{"city":"Paris"}'),
        ("call_def", "get_time", '{"tz":"CET"}'),
    ]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage.prompt_tokens == 12
    assert completion.usage.completion_tokens == 30
    assert completion.usage.total_tokens == 42
    assert completion.usage.prompt_tokens_details.cached_tokens == 4
    assert completion.usage.completion_tokens_details.reasoning_tokens == 7


def test_stream_and_non_stream_agree_through_the_sdk() -> None:
    streamed = sdk_rebuild(encode_stream(TOOL_EVENTS, include_usage=True))
    whole = ChatCompletion.model_validate(
        orjson.loads(
            completion_body(ResponseBuilder().extend(TOOL_EVENTS).build(), CID, "gpt-test", CREATED)
        )
    )
    a, b = streamed.choices[0].message, whole.choices[0].message
    assert (a.content, a.role) == (b.content, b.role)
    assert calls_of(a.tool_calls) == calls_of(b.tool_calls)
    assert streamed.usage == whole.usage
    assert (b.model_extra or {})["reasoning_content"] == "Let me think."


def test_missing_tool_call_id_is_made_up_once_and_deterministically() -> None:
    events: list[Event] = [
        ToolCallDelta(0, name="f", arguments="{"),
        ToolCallDelta(0, arguments="}"),
        Finish("tool_calls"),
    ]
    first, second = encode_stream(events), encode_stream(events)
    assert first == second
    data = [orjson.loads(d) for d in frames(first)[:-1]]
    made_up = data[0]["choices"][0]["delta"]["tool_calls"][0]["id"]
    assert made_up.startswith("call_")
    assert len(made_up) == len("call_") + 24
    assert "id" not in data[1]["choices"][0]["delta"]["tool_calls"][0]
    (call,) = sdk_rebuild(first).choices[0].message.tool_calls
    assert (call.id, call.function.name, call.function.arguments) == (made_up, "f", "{}")


def test_repeated_id_on_later_pieces_is_not_resent() -> None:
    # SDK accumulators concatenate strings: a second id would become "call_xcall_x".
    events: list[Event] = [
        ToolCallDelta(0, id="call_x", name="f", arguments=""),
        ToolCallDelta(0, id="call_x", arguments="{}"),
        Finish("tool_calls"),
    ]
    (call,) = sdk_rebuild(encode_stream(events)).choices[0].message.tool_calls
    assert call.id == "call_x"


def test_empty_pieces_send_nothing() -> None:
    encoder = ChunkEncoder(CID, "m", CREATED, include_usage=False)
    assert encoder.encode(TextDelta("")) == b""
    assert encoder.encode(ReasoningDelta("")) == b""
    assert encoder.encode(Usage(1, 2)) == b""
    assert encoder.encode(ToolCallDelta(0, id="c", name="f")) != b""
    assert encoder.encode(ToolCallDelta(0)) == b""
    # The role went out with the first frame that was sent, not with a skipped one.
    assert b'"role"' not in encoder.encode(TextDelta("x"))


def test_role_is_sent_even_when_the_answer_is_empty() -> None:
    stream = encode_stream([Finish("stop")])
    (chunk,) = chunks(stream)
    assert chunk.choices[0].delta.role == "assistant"
    assert chunk.choices[0].finish_reason == "stop"
    completion = sdk_rebuild(stream)
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == ""


def test_usage_chunk_only_when_asked() -> None:
    events: list[Event] = [TextDelta("x"), Usage(3, 4), Finish("stop")]
    without = frames(encode_stream(events, include_usage=False))
    assert len(without) == 3
    assert all('"usage"' not in f for f in without)
    with_usage = frames(encode_stream(events, include_usage=True))
    assert len(with_usage) == 4
    usage_chunk = orjson.loads(with_usage[-2])
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["total_tokens"] == 7
    assert usage_chunk["id"] == CID
    ChatCompletionChunk.model_validate(usage_chunk)


def test_usage_chunk_has_zeros_when_no_usage_was_seen() -> None:
    data = frames(encode_stream([TextDelta("x"), Finish("stop")], include_usage=True))
    assert orjson.loads(data[-2])["usage"] == usage_dict(Usage())


def test_latest_usage_wins() -> None:
    data = frames(encode_stream([Usage(1, 1), Usage(5, 6), Finish("stop")], include_usage=True))
    assert orjson.loads(data[-2])["usage"]["total_tokens"] == 11


@pytest.mark.parametrize("reason", ["stop", "length", "tool_calls", "content_filter"])
def test_every_finish_reason_validates(reason: Any) -> None:
    (_, last) = chunks(encode_stream([TextDelta("a"), Finish(reason)]))
    assert last.choices[0].finish_reason == reason


def test_awkward_text_survives_the_round_trip() -> None:
    texts = ['"quoted"\n', "\\", "\u2028", "emoji 😀", "\x00ctl", "data: [DONE]\n\n", "é"]
    stream = encode_stream([TextDelta(t) for t in texts] + [Finish("stop")])
    assert sdk_rebuild(stream).choices[0].message.content == "".join(texts)
    # The text "data: [DONE]" inside a JSON string never looks like the real end.
    messages = SSEDecoder().feed(stream)
    assert [m.data for m in messages].count("[DONE]") == 1


def test_lone_surrogate_is_repaired_not_fatal() -> None:
    stream = encode_stream([TextDelta("a\ud800b"), Finish("stop")])
    assert sdk_rebuild(stream).choices[0].message.content == "a\ufffdb"


def test_model_and_id_are_escaped() -> None:
    encoder = ChunkEncoder('id"x', 'model\\"y', CREATED, include_usage=True)
    stream = encoder.encode(TextDelta("t")) + encoder.done()
    for chunk in chunks(stream):
        assert (chunk.id, chunk.model) == ('id"x', 'model\\"y')


def test_decoder_reads_the_encoder_at_any_split() -> None:
    stream = encode_stream(TOOL_EVENTS, include_usage=True)
    expected = frames(stream)
    for cut in range(0, len(stream), 7):
        decoder = SSEDecoder()
        got = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) + decoder.flush()
        assert [m.data for m in got] == expected


# --- non-streaming completions --------------------------------------------------------


def test_completion_body_text() -> None:
    response = ChatResponse("Hello!", None, (), "stop", Usage(9, 3))
    raw = orjson.loads(completion_body(response, CID, "gpt-test", CREATED))
    assert raw["object"] == "chat.completion"
    assert raw["choices"][0]["logprobs"] is None
    assert "tool_calls" not in raw["choices"][0]["message"]
    assert "reasoning_content" not in raw["choices"][0]["message"]
    completion = ChatCompletion.model_validate(raw)
    assert (completion.id, completion.model, completion.created) == (CID, "gpt-test", CREATED)
    assert completion.choices[0].message.content == "Hello!"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.total_tokens == 12


def test_completion_body_tool_calls_and_null_content() -> None:
    response = ChatResponse(
        None,
        "thinking",
        (ToolCall("call_1", "f", '{"a":1}'), ToolCall("", "g", "{}")),
        "tool_calls",
        None,
    )
    raw = orjson.loads(completion_body(response, CID, "m", CREATED))
    assert "usage" not in raw
    message = raw["choices"][0]["message"]
    assert message["content"] is None
    assert message["reasoning_content"] == "thinking"
    assert message["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a":1}'},
    }
    # A call the provider gave no id gets the same made-up id a stream would.
    assert message["tool_calls"][1]["id"].startswith("call_")
    completion = ChatCompletion.model_validate(raw)
    calls = completion.choices[0].message.tool_calls
    assert calls is not None
    assert [c.function.name for c in calls] == ["f", "g"]  # type: ignore[union-attr]


def test_made_up_ids_match_between_stream_and_body() -> None:
    events: list[Event] = [ToolCallDelta(0, name="f", arguments="{}"), Finish("tool_calls")]
    streamed = sdk_rebuild(encode_stream(events)).choices[0].message.tool_calls[0].id
    body = orjson.loads(
        completion_body(ResponseBuilder().extend(events).build(), CID, "gpt-test", CREATED)
    )
    assert body["choices"][0]["message"]["tool_calls"][0]["id"] == streamed
