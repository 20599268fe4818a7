"""The official `openai` client talking to the wire layer, through its real HTTP stack.

The SDK's transport is swapped for an in-process handler that does what the server will:
parse the body the SDK really sent, answer with the encoder's bytes. Both directions are
therefore checked against what the SDK actually produces and accepts.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx2
import openai
import pydantic
import pytest

from olp.errors import OLPError
from olp.ir import ChatRequest, Event, Finish, ResponseBuilder, TextDelta, ToolCallDelta, Usage
from olp.wire.openai_chat import ChunkEncoder, completion_body, error_body, parse_chat_request

Answer = Callable[[ChatRequest], list[Event]]


def client_for(answer: Answer, seen: list[ChatRequest]) -> openai.OpenAI:
    def handle(request: httpx2.Request) -> httpx2.Response:
        try:
            req = parse_chat_request(request.content)
        except OLPError as err:
            return httpx2.Response(err.http_status, content=error_body(err))
        seen.append(req)
        events = answer(req)
        if req.stream:
            encoder = ChunkEncoder("chatcmpl-1", req.model, 1, req.include_usage)
            body = b"".join(encoder.encode(e) for e in events) + encoder.done()
            return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
        response = ResponseBuilder().extend(events).build()
        return httpx2.Response(
            200,
            content=completion_body(response, "chatcmpl-1", req.model, 1),
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


def test_non_streaming_call() -> None:
    seen: list[ChatRequest] = []
    client = client_for(echo, seen)
    completion = client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}],
        temperature=0.2,
        max_completion_tokens=50,
        stop=["END"],
        seed=7,
    )
    assert completion.choices[0].message.content == "you said: hello"
    assert completion.usage is not None
    assert completion.usage.total_tokens == 8
    (req,) = seen
    assert (req.temperature, req.max_tokens, req.max_tokens_field) == (
        0.2,
        50,
        "max_completion_tokens",
    )
    assert (req.stop, req.seed, req.stream) == (("END",), 7, False)


def test_streaming_call_with_usage() -> None:
    seen: list[ChatRequest] = []
    client = client_for(echo, seen)
    stream = client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = [], None
    for chunk in stream:
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(text) == "you said: hi"
    assert usage is not None
    assert usage.total_tokens == 8
    assert seen[0].include_usage is True


def weather_tool_call(req: ChatRequest) -> list[Event]:
    assert req.tools
    return [
        ToolCallDelta(0, id="call_w", name=req.tools[0].name, arguments='{"city":'),
        ToolCallDelta(0, arguments='"Paris"}'),
        Finish("tool_calls"),
    ]


class GetWeather(pydantic.BaseModel):
    city: str


def test_stream_helper_with_strict_pydantic_tool() -> None:
    seen: list[ChatRequest] = []
    client = client_for(weather_tool_call, seen)
    with client.chat.completions.stream(
        model="gpt-test",
        messages=[{"role": "user", "content": "weather in Paris?"}],
        tools=[openai.pydantic_function_tool(GetWeather)],
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    (call,) = final.choices[0].message.tool_calls or []
    assert call.id == "call_w"
    assert call.function.parsed_arguments == GetWeather(city="Paris")
    (req,) = seen
    assert req.tools[0].name == "GetWeather"
    assert req.tools[0].strict is True
    assert req.tools[0].parameters is not None


class Answer42(pydantic.BaseModel):
    value: int


def test_parse_helper_with_json_schema_response_format() -> None:
    seen: list[ChatRequest] = []
    client = client_for(lambda _: [TextDelta('{"value": 42}'), Finish("stop")], seen)
    completion = client.chat.completions.parse(
        model="gpt-test",
        messages=[{"role": "user", "content": "the answer?"}],
        response_format=Answer42,
    )
    assert completion.choices[0].message.parsed == Answer42(value=42)
    fmt = seen[0].response_format
    assert fmt is not None
    assert fmt.type == "json_schema"
    assert fmt.json_schema is not None
    assert fmt.json_schema["name"] == "Answer42"


def test_multimodal_and_tool_history_from_the_sdk() -> None:
    seen: list[ChatRequest] = []
    client = client_for(echo, seen)
    client.chat.completions.create(
        model="gpt-test",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "see"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://x/i.png", "detail": "high"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
        ],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        tool_choice="auto",
    )
    (req,) = seen
    assert [m.role for m in req.messages] == ["user", "assistant", "tool"]
    assert req.messages[1].tool_calls[0].id == "c1"
    assert req.messages[2].tool_call_id == "c1"
    assert req.tool_choice == "auto"


def test_sdk_surfaces_our_validation_error() -> None:
    client = client_for(echo, [])
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "x"}], temperature=3
        )
    err = info.value
    assert err.status_code == 400
    assert err.code == "invalid_request_error"
    assert err.param == "temperature"
    assert "temperature: must be a number between 0 and 2" in err.message
