"""Client tools over the real `gemini` CLI through OLP's MCP bridge, end to end.

The openai SDK talks to OLP; OLP runs the real Gemini CLI with the request's tools served
to it over MCP; the CLI talks to ResponsesGeminiUpstream (the Gemini API) on 127.0.0.1,
which answers with the scripted function calls and then with text. What the upstream
received shows what the model saw: only the client's tools (as `mcp_olp_<name>`), and on
the follow-up, the tool result. No CLI process may outlive a request (the process table
is read after each).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from real_cli import RealCli, real_cli
from real_cli_chat import cli_processes, no_cli_left, real_cli_config

from fakes.responses_gemini_upstream import (
    ResponsesGeminiUpstream,
    gemini_function_responses,
    gemini_tool_names,
)
from fakes.upstream import FakeUpstream, Hang, Text, ToolCalls
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a time zone.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
FINAL = "It is sunny in Paris."
RESULT = "sunny, 21 C (OLP-TOOL-RESULT)"


@pytest.fixture(scope="module")
def gemini() -> RealCli:
    return real_cli("gemini")


@pytest.fixture
def upstream() -> Iterator[ResponsesGeminiUpstream]:
    with ResponsesGeminiUpstream() as up:
        yield up


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        up.script(*[Text("from beta")] * 4)
        yield up


def config(gemini: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream) -> Any:
    """Chain `chat`: the real CLI, then `beta`; chain `solo`: the real CLI alone."""
    env = {"GOOGLE_GEMINI_BASE_URL": upstream.base_url, "GEMINI_API_KEY": "fake-gemini-key"}
    conf = real_cli_config("gemini", gemini, env, beta, provider={"consent": True})
    conf["routing"]["chains"]["solo"] = [{"provider": "real", "model": gemini.model}]
    return conf


@pytest.fixture
def olp(
    tmp_path: Path, gemini: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> Iterator[ThreadServer]:
    with olp_server(tmp_path, config(gemini, upstream, beta)) as server:
        yield server
    assert cli_processes(gemini) == []  # shutdown left none either


def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)


def model_requests(up: ResponsesGeminiUpstream) -> list[dict[str, Any]]:
    return [r.json for r in up.requests if ":streamGenerateContent" in r.path]


def declarations(body: dict[str, Any]) -> dict[str, Any]:
    return {d["name"]: d for tool in body.get("tools", []) for d in tool["functionDeclarations"]}


def test_tool_call_then_the_result_gets_the_final_answer(
    olp: ThreadServer, gemini: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    upstream.script(ToolCalls([("mcp_olp_get_weather", '{"city": "Paris"}')]), Text(FINAL))
    first = client(olp).chat.completions.create(
        model="chat", messages=QUESTION, tools=[WEATHER, CLOCK]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    assert call.function.name == "get_weather"  # the client's own name, no mcp_olp_ prefix
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")
    [offered] = model_requests(upstream)
    assert gemini_tool_names(offered) == ["mcp_olp_get_time", "mcp_olp_get_weather"]
    weather = declarations(offered)["mcp_olp_get_weather"]
    schema = weather["parametersJsonSchema"]
    # The CLI adds a parameter of its own to every tool; OLP drops it from the calls.
    assert set(schema["properties"].pop("wait_for_previous")) == {"type", "description"}
    assert schema == WEATHER["function"]["parameters"]  # type: ignore[index]
    assert weather["description"] == "The weather in a city now."
    assert no_cli_left(gemini)  # the run ended with the answer: nothing waits

    follow_up = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": RESULT},
    ]
    second = client(olp).chat.completions.create(
        model="chat",
        messages=follow_up,  # type: ignore[arg-type]
        tools=[WEATHER, CLOCK],
    )
    assert second.choices[0].message.content == FINAL
    assert second.choices[0].finish_reason == "stop"
    _, answered = model_requests(upstream)
    assert RESULT in json.dumps(answered["contents"])  # the model saw the result
    assert call.id in json.dumps(answered["contents"])  # and which call it answers
    assert no_cli_left(gemini)
    assert beta.calls == 0


def test_streamed_tool_calls_in_parallel(
    olp: ThreadServer, gemini: RealCli, upstream: ResponsesGeminiUpstream
) -> None:
    # `wait_for_previous` is the CLI's own parameter: the second call would run after the
    # first, which the bridge holds, so only the first reaches it; both are the answer.
    upstream.script(
        ToolCalls(
            [
                ("mcp_olp_get_weather", '{"city": "Paris"}'),
                ("mcp_olp_get_time", '{"tz": "CET", "wait_for_previous": true}'),
            ]
        )
    )
    stream = client(olp).chat.completions.create(
        model="chat", messages=QUESTION, tools=[WEATHER, CLOCK], stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for piece in delta.tool_calls or []:
            call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += piece.id or ""
            if piece.function is not None:
                call["name"] += piece.function.name or ""
                call["arguments"] += piece.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert [c["name"] for _, c in sorted(calls.items())] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}
    assert json.loads(calls[1]["arguments"]) == {"tz": "CET"}  # not the CLI's parameter
    ids = [c["id"] for c in calls.values()]
    assert all(i.startswith("call_") for i in ids) and len(set(ids)) == 2
    assert len(model_requests(upstream)) == 1  # the calls ended the run: no second turn
    assert no_cli_left(gemini)


def test_parallel_tool_calls_false_answers_one_call(
    olp: ThreadServer, gemini: RealCli, upstream: ResponsesGeminiUpstream
) -> None:
    upstream.script(
        ToolCalls(
            [
                ("mcp_olp_get_weather", '{"city": "Paris"}'),
                ("mcp_olp_get_time", '{"tz": "CET"}'),
            ]
        )
    )
    answer = client(olp).chat.completions.create(
        model="chat", messages=QUESTION, tools=[WEATHER, CLOCK], parallel_tool_calls=False
    )
    [call] = answer.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    assert answer.choices[0].finish_reason == "tool_calls"
    assert no_cli_left(gemini)


def test_tool_choice_none_offers_no_tools(
    olp: ThreadServer, gemini: RealCli, upstream: ResponsesGeminiUpstream
) -> None:
    upstream.script(Text("No tools needed."))
    answer = client(olp).chat.completions.create(
        model="chat", messages=QUESTION, tools=[WEATHER], tool_choice="none"
    )
    assert answer.choices[0].message.content == "No tools needed."
    assert answer.choices[0].message.tool_calls is None
    [request] = model_requests(upstream)
    assert gemini_tool_names(request) == []
    assert no_cli_left(gemini)


def test_a_hop_that_cannot_honour_tool_choice_is_skipped(
    olp: ThreadServer, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    raw = client(olp).chat.completions.with_raw_response.create(
        model="chat", messages=QUESTION, tools=[WEATHER], tool_choice="required"
    )
    assert raw.parse().choices[0].message.content == "from beta"
    [hop] = json.loads(raw.headers["x-olp-fallback-detail"])
    assert (hop["provider"], hop["code"], hop["trigger"]) == ("real", "UNSUPPORTED", "skip")
    assert upstream.calls == 0  # the CLI never ran


# -- tool arguments and the turn bound ----------------------------------------------------


def test_arguments_off_the_tools_schema_go_back_to_the_model_once(
    olp: ThreadServer, gemini: RealCli, upstream: ResponsesGeminiUpstream
) -> None:
    upstream.script(
        ToolCalls([("mcp_olp_get_weather", '{"city": 75}')]),
        ToolCalls([("mcp_olp_get_weather", '{"city": "Paris"}')]),
    )
    answer = client(olp).chat.completions.create(model="chat", messages=QUESTION, tools=[WEATHER])
    [call] = answer.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    _, retry = model_requests(upstream)
    # The CLI checks the arguments against the tool's schema itself, before the bridge
    # would: the model gets its error as the call's functionResponse.
    [response] = gemini_function_responses(retry)
    assert response["name"] == "mcp_olp_get_weather"
    assert response["response"] == {"error": "params/city must be string"}
    assert no_cli_left(gemini)


def test_arguments_off_the_schema_twice_is_an_error_that_says_so(
    olp: ThreadServer, gemini: RealCli, upstream: ResponsesGeminiUpstream
) -> None:
    upstream.script(*[ToolCalls([("mcp_olp_get_weather", '{"city": 75}')])] * 4)
    with pytest.raises(openai.APIStatusError) as caught:
        client(olp).chat.completions.create(model="solo", messages=QUESTION, tools=[WEATHER])
    message = str(caught.value.body)
    assert "the model's tool call is invalid (after one retry" in message
    assert "get_weather: /city: 75 is not of type 'string'" in message
    assert len(model_requests(upstream)) == 2
    assert no_cli_left(gemini)


def test_a_model_that_keeps_calling_a_missing_tool_is_bounded(
    olp: ThreadServer, gemini: RealCli, upstream: ResponsesGeminiUpstream
) -> None:
    upstream.script(*[ToolCalls([("mcp_olp_launch_rockets", "{}")])] * 20)
    with pytest.raises(openai.APIStatusError) as caught:
        client(olp).chat.completions.create(model="solo", messages=QUESTION, tools=[WEATHER])
    assert "launch_rockets: not one of the request's tools" in str(caught.value.body)
    assert len(model_requests(upstream)) == 2
    assert no_cli_left(gemini)


def test_a_client_that_leaves_mid_run_leaves_no_process(
    olp: ThreadServer, gemini: RealCli, upstream: ResponsesGeminiUpstream
) -> None:
    upstream.script(Hang(60))
    http = httpx.Client(timeout=60)
    body = {"model": "chat", "messages": QUESTION, "tools": [WEATHER], "stream": True}
    headers = {"authorization": f"Bearer {OWNER_TOKEN}"}

    def leave_early() -> None:
        with (
            pytest.raises(httpx.ReadTimeout),
            http.stream(
                "POST",
                f"{olp.base_url}/v1/chat/completions",
                json=body,
                headers=headers,
                timeout=httpx.Timeout(60, read=8),
            ) as resp,
        ):
            for _ in resp.iter_bytes():
                pass

    thread = threading.Thread(target=leave_early)
    thread.start()
    assert upstream.wait_for(lambda: len(model_requests(upstream)) == 1, timeout=30)
    assert cli_processes(gemini)  # running, waiting on the upstream
    thread.join(30)
    http.close()
    assert no_cli_left(gemini, within_s=15)
