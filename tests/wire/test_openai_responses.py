"""The Responses wire (olp.wire.openai_responses) against the official openai SDK.

Requests are what the SDK (and Codex, from a captured body) really send; answers are
checked by the SDK's own pydantic models (`Response`, `ResponseStreamEvent`) and by its
`responses.stream` accumulator, through its real HTTP stack with an in-process transport.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
import orjson
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from olp.errors import Failure, InvalidRequest, OLPError, ProviderError
from olp.ir import (
    ChatRequest,
    Event,
    Finish,
    ImagePart,
    NamedToolChoice,
    ReasoningDelta,
    ResponseBuilder,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from olp.wire.dialect import Dialect
from olp.wire.openai_responses import OpenAIResponses

Answer = Callable[[ChatRequest], list[Event]]
DIALECT: Dialect = OpenAIResponses()  # (mypy checks it keeps to the contract)
FIXTURES = Path(__file__).parent.parent / "fixtures" / "codex"
# The SDK's event models by their `type`, so a bad event fails against its own model.
_EVENTS: dict[str, type[pydantic.BaseModel]] = {
    typing.get_args(cls.model_fields["type"].annotation)[0]: cls
    for cls in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """Each frame's data, checked against the SDK's event union and its `event:` name."""
    out = []
    for frame in body.decode().split("\n\n"):
        if not frame.strip() or frame.startswith(":"):
            continue
        name_line, data_line = frame.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert name_line == f"event: {data['type']}"
        _EVENTS[data["type"]].model_validate(data)
        out.append(data)
    return out


def stream_body(request: ChatRequest, events: list[Event]) -> bytes:
    encoder = DIALECT.stream_encoder(request, "resp_1", 1)
    return encoder.start() + b"".join(encoder.encode(e) for e in events) + encoder.done()


def client_for(answer: Answer, seen: list[ChatRequest]) -> openai.OpenAI:
    def handle(request: httpx2.Request) -> httpx2.Response:
        try:
            req = DIALECT.parse(request.content)
        except OLPError as err:
            return httpx2.Response(err.http_status, content=DIALECT.error_body(err))
        seen.append(req)
        events = answer(req)
        if req.stream:
            body = stream_body(req, events)
            return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
        response = ResponseBuilder().extend(events).build()
        return httpx2.Response(
            200,
            content=DIALECT.response_body(response, req, "resp_1", 1),
            headers={"content-type": "application/json"},
        )

    http = httpx2.Client(transport=httpx2.MockTransport(handle))
    return openai.OpenAI(
        api_key="olp-test", base_url="http://olp.test/v1", http_client=http, max_retries=0
    )


def echo(req: ChatRequest) -> list[Event]:
    return [
        TextDelta("you said: "),
        TextDelta(req.messages[-1].text()),
        Usage(5, 3),
        Finish("stop"),
    ]


def call_weather(req: ChatRequest) -> list[Event]:
    return [
        ToolCallDelta(0, id="call_abc", name="get_weather", arguments='{"city":'),
        ToolCallDelta(0, arguments='"Paris"}'),
        Usage(9, 4),
        Finish("tool_calls"),
    ]


WEATHER_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "strict": False,
}


def test_create_with_instructions_and_a_string_input() -> None:
    seen: list[ChatRequest] = []
    client = client_for(echo, seen)
    response = client.responses.create(
        model="m", instructions="Be brief.", input="hello", max_output_tokens=50, temperature=0
    )
    assert response.output_text == "you said: hello"
    assert response.status == "completed"
    assert response.usage is not None and response.usage.total_tokens == 8
    request = seen[0]
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "Be brief."),
        ("user", "hello"),
    ]
    assert (request.max_tokens, request.temperature, request.stream) == (50, 0.0, False)


def test_stream_with_the_sdk_accumulator() -> None:
    seen: list[ChatRequest] = []
    client = client_for(echo, seen)
    with client.responses.stream(model="m", input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "you said: hi"
    assert final.output_text == "you said: hi"
    assert final.usage is not None and final.usage.input_tokens == 5


def test_function_call_round_trip() -> None:
    seen: list[ChatRequest] = []
    client = client_for(call_weather, seen)
    first = client.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER_TOOL])
    calls = [item for item in first.output if item.type == "function_call"]
    assert [(c.name, c.call_id, c.arguments) for c in calls] == [
        ("get_weather", "call_abc", '{"city":"Paris"}')
    ]
    client = client_for(echo, seen)
    history: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        *[c.model_dump() for c in calls],
        {"type": "function_call_output", "call_id": "call_abc", "output": "sunny"},
    ]
    second = client.responses.create(model="m", input=history, tools=[WEATHER_TOOL])
    assert second.output_text == "you said: sunny"
    messages = seen[1].messages
    assert messages[1].role == "assistant"
    assert [(c.id, c.name) for c in messages[1].tool_calls] == [("call_abc", "get_weather")]
    assert (messages[2].role, messages[2].tool_call_id, messages[2].content) == (
        "tool",
        "call_abc",
        "sunny",
    )


def test_streamed_function_call() -> None:
    client = client_for(call_weather, [])
    with client.responses.stream(model="m", input="w?", tools=[WEATHER_TOOL]) as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == '{"city":"Paris"}'
    call = final.output[0]
    assert call.type == "function_call" and call.arguments == '{"city":"Paris"}'


def test_structured_output_with_text_format() -> None:
    seen: list[ChatRequest] = []

    class City(pydantic.BaseModel):
        name: str

    client = client_for(lambda _: [TextDelta('{"name":"Paris"}'), Finish("stop")], seen)
    parsed = client.responses.parse(model="m", input="a city", text_format=City)
    assert parsed.output_parsed == City(name="Paris")
    fmt = seen[0].response_format
    assert fmt is not None and fmt.type == "json_schema"
    assert fmt.json_schema is not None and fmt.json_schema["name"] == "City"


def test_events_in_order_with_reasoning_text_and_calls() -> None:
    request = DIALECT.parse(b'{"model":"m","input":"x","stream":true}')
    events: list[Event] = [
        ReasoningDelta("think"),
        ReasoningDelta("ing"),
        TextDelta("Hello"),
        ToolCallDelta(0, id="c1", name="f", arguments="{}"),
        ToolCallDelta(1, id="c2", name="g", arguments="{"),
        ToolCallDelta(1, arguments="}"),
        Usage(3, 2, reasoning_tokens=1),
        Finish("tool_calls"),
    ]
    frames = sse_events(stream_body(request, events))
    assert [f["sequence_number"] for f in frames] == list(range(len(frames)))
    kinds = [f["type"] for f in frames]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-1] == "response.completed"
    assert "response.reasoning_summary_text.delta" in kinds
    done = [f["item"] for f in frames if f["type"] == "response.output_item.done"]
    assert [item["type"] for item in done] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    final = Response.model_validate(frames[-1]["response"])
    assert [item.type for item in final.output] == [i["type"] for i in done]
    assert final.usage is not None and final.usage.output_tokens_details.reasoning_tokens == 1


def test_truncated_answer_is_incomplete() -> None:
    request = DIALECT.parse(b'{"model":"m","input":"x","max_output_tokens":3}')
    frames = sse_events(stream_body(request, [TextDelta("abc"), Finish("length")]))
    assert frames[-1]["type"] == "response.incomplete"
    response = Response.model_validate(frames[-1]["response"])
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_empty_answer_is_an_empty_message() -> None:
    request = DIALECT.parse(b'{"model":"m","input":"x"}')
    frames = sse_events(stream_body(request, [Finish("stop")]))
    final = Response.model_validate(frames[-1]["response"])
    assert final.output_text == "" and final.output[0].type == "message"


def test_failure_after_start_is_response_failed() -> None:
    request = DIALECT.parse(b'{"model":"m","input":"x","stream":true}')
    encoder = DIALECT.stream_encoder(request, "resp_1", 1)
    body = (
        encoder.start()
        + encoder.encode(TextDelta("par"))
        + encoder.error_frame(
            ProviderError(Failure.UPSTREAM_ERROR, "the upstream went away", provider="p")
        )
    )
    frames = sse_events(body)
    failed = frames[-1]
    assert failed["type"] == "response.failed"
    response = Response.model_validate(failed["response"])
    assert response.status == "failed" and response.error is not None
    assert "went away" in response.error.message
    assert frames[-2]["type"] == "response.output_item.done"  # the partial text is closed


def test_non_streaming_body_validates() -> None:
    request = DIALECT.parse(orjson.dumps({"model": "m", "input": "x", "tools": [WEATHER_TOOL]}))
    answer = (
        ResponseBuilder()
        .extend([ReasoningDelta("r"), TextDelta("t"), *call_weather(request)])
        .build()
    )
    body = orjson.loads(DIALECT.response_body(answer, request, "resp_9", 7))
    response = Response.model_validate(body)
    assert [i.type for i in response.output] == ["reasoning", "message", "function_call"]
    assert response.id == "resp_9" and response.created_at == 7
    assert response.tools[0].type == "function"


def test_the_codex_request_parses() -> None:
    body = (FIXTURES / "responses_request.json").read_bytes()
    request = DIALECT.parse(body)
    assert [m.role for m in request.messages] == ["developer", "developer", "user", "user"]
    assert request.messages[-1].content == "What is 2+2?"
    names = [t.name for t in request.tools]
    assert names == ["request_user_input", "apply_patch", "view_image"]
    apply_patch = request.tools[1]
    assert apply_patch.parameters is not None
    assert apply_patch.parameters["required"] == ["input"]
    assert request.extra["reasoning_effort"] == "medium"
    assert request.extra["verbosity"] == "low"
    assert request.stream and request.tool_choice == "auto"


def test_input_items_map_onto_messages() -> None:
    body = {
        "model": "m",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look: "},
                    {
                        "type": "input_image",
                        "image_url": "data:image/png;base64,AA==",
                        "detail": "low",
                    },
                ],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "I will call", "annotations": []},
                ],
            },
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** x"},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "two"},
        ],
        "tool_choice": {"type": "function", "name": "f"},
        "tools": [
            {"type": "function", "name": "f"},
            {"type": "custom", "name": "apply_patch"},
            {"type": "namespace", "name": "ns", "description": "d", "tools": []},
        ],
    }
    request = DIALECT.parse(orjson.dumps(body))
    user, assistant, out1, out2 = request.messages
    assert isinstance(user.content, tuple) and user.content[1] == ImagePart(
        "data:image/png;base64,AA==", "low"
    )
    assert assistant.content == "I will call"
    assert [c.id for c in assistant.tool_calls] == ["c1", "c2"]
    assert json.loads(assistant.tool_calls[1].arguments) == {"input": "*** x"}
    assert (out1.tool_call_id, out2.tool_call_id) == ("c1", "c2")
    assert request.tool_choice == NamedToolChoice("f")
    assert [t.name for t in request.tools] == ["f", "apply_patch"]  # no namespace groups


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": "x"}, "model", "required"),
        ({"model": "m"}, "input", "required"),
        ({"model": "m", "input": 3}, "input", "string or an array"),
        (
            {"model": "m", "input": "x", "tools": [{"type": "web_search"}]},
            "tools[0].type",
            "web_search",
        ),
        (
            {"model": "m", "input": "x", "tools": [{"type": "file_search"}]},
            "tools[0].type",
            "file_search",
        ),
        (
            {"model": "m", "input": "x", "previous_response_id": "resp_1"},
            "previous_response_id",
            "keeps no",
        ),
        ({"model": "m", "input": "x", "background": True}, "background", "not supported"),
        (
            {"model": "m", "input": [{"type": "item_reference", "id": "x"}]},
            "input[0].type",
            "item_reference",
        ),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role", "robot"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_file"}]}]},
            "input[0].content[0].type",
            "input_file",
        ),
        (
            {"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input[0].call_id",
            "required",
        ),
        ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens", "positive"),
        ({"model": "m", "input": "x", "temperature": 3}, "temperature", "between"),
        (
            {"model": "m", "input": "x", "text": {"format": {"type": "xml"}}},
            "text.format.type",
            "xml",
        ),
        (
            {"model": "m", "input": "x", "tool_choice": {"type": "function", "name": "g"}},
            "tool_choice.name",
            "no tool",
        ),
        ({"model": "m", "input": "x", "tool_choice": "required"}, "tool_choice", "non-empty tools"),
        ({"model": "m", "input": "x", "reasoning": {"effort": 1}}, "reasoning.effort", "string"),
    ],
)
def test_bad_requests_name_the_field(body: dict[str, Any], param: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        DIALECT.parse(orjson.dumps(body))
    assert caught.value.param == param
    assert words in caught.value.message


def test_sdk_sees_an_openai_shaped_error() -> None:
    client = client_for(echo, [])
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input="x", tools=[{"type": "web_search"}])
    assert "web_search" in caught.value.message


def test_store_false_and_metadata_are_accepted() -> None:
    seen: list[ChatRequest] = []
    client = client_for(echo, seen)
    response = client.responses.create(model="m", input="x", store=False, metadata={"a": "b"})
    assert response.metadata == {"a": "b"}
    assert seen[0].extra["metadata"] == {"a": "b"}
    assert "store" not in seen[0].extra


def test_response_id_is_resp() -> None:
    assert DIALECT.response_id("req_00ab") == "resp_00ab"
