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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from real_cli import RealCli, real_cli
from real_cli_tools import (
    CLOCK,
    FINAL,
    OFF_SCHEMA,
    PARIS,
    QUESTION,
    RESULT,
    WEATHER,
    CliProcesses,
    ask,
    assert_the_result_gets_the_final_answer,
    assert_tool_choice_none_answers_in_text,
    assert_unhonoured_tool_choice_skips_the_hop,
    leave_mid_run,
    refuse_a_missing_tool,
    refuse_invalid_twice,
    serve,
    stream_tool_calls,
    tools_config,
    weather_and_time,
    weather_call,
)

from fakes.responses_gemini_upstream import (
    ResponsesGeminiUpstream,
    gemini_function_responses,
    gemini_tool_names,
)
from fakes.upstream import FakeUpstream, Hang, Text, ToolCalls
from olp_server import ThreadServer

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]
PREFIX = "mcp_olp_"  # what the Gemini CLI puts before the name of a tool from MCP server `olp`


@pytest.fixture(scope="module")
def gemini() -> RealCli:
    return real_cli("gemini")


@pytest.fixture(scope="module")
def processes(gemini: RealCli) -> CliProcesses:
    return CliProcesses.of(gemini)


@pytest.fixture
def upstream() -> Iterator[ResponsesGeminiUpstream]:
    with ResponsesGeminiUpstream() as up:
        yield up


def config(gemini: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream) -> Any:
    env = {"GOOGLE_GEMINI_BASE_URL": upstream.base_url, "GEMINI_API_KEY": "fake-gemini-key"}
    return tools_config("gemini", gemini, env, beta, provider={"consent": True})


@pytest.fixture
def olp(
    tmp_path: Path,
    gemini: RealCli,
    processes: CliProcesses,
    upstream: ResponsesGeminiUpstream,
    beta: FakeUpstream,
) -> Iterator[ThreadServer]:
    with serve(tmp_path, config(gemini, upstream, beta), processes) as server:
        yield server


def model_requests(up: ResponsesGeminiUpstream) -> list[dict[str, Any]]:
    return [r.json for r in up.requests if ":streamGenerateContent" in r.path]


def declarations(body: dict[str, Any]) -> dict[str, Any]:
    return {d["name"]: d for tool in body.get("tools", []) for d in tool["functionDeclarations"]}


def test_tool_call_then_the_result_gets_the_final_answer(
    olp: ThreadServer,
    processes: CliProcesses,
    upstream: ResponsesGeminiUpstream,
    beta: FakeUpstream,
) -> None:
    upstream.script(ToolCalls([(f"{PREFIX}get_weather", PARIS)]), Text(FINAL))
    call = weather_call(ask(olp, QUESTION, tools=[WEATHER, CLOCK]))  # named with no prefix
    assert call.id.startswith("call_")
    [offered] = model_requests(upstream)
    assert gemini_tool_names(offered) == ["mcp_olp_get_time", "mcp_olp_get_weather"]
    weather = declarations(offered)["mcp_olp_get_weather"]
    schema = weather["parametersJsonSchema"]
    # The CLI adds a parameter of its own to every tool; OLP drops it from the calls.
    assert set(schema["properties"].pop("wait_for_previous")) == {"type", "description"}
    assert schema == WEATHER["function"]["parameters"]
    assert weather["description"] == "The weather in a city now."
    assert processes.none_left()  # the run ended with the answer: nothing waits

    assert_the_result_gets_the_final_answer(olp, QUESTION, call)
    _, answered = model_requests(upstream)
    assert RESULT in json.dumps(answered["contents"])  # the model saw the result
    assert call.id in json.dumps(answered["contents"])  # and which call it answers
    assert processes.none_left()
    assert beta.calls == 0


def test_streamed_tool_calls_in_parallel(
    olp: ThreadServer, processes: CliProcesses, upstream: ResponsesGeminiUpstream
) -> None:
    # `wait_for_previous` is the CLI's own parameter: the second call would run after the
    # first, which the bridge holds, so only the first reaches it; both are the answer.
    upstream.script(weather_and_time(PREFIX, '{"tz": "CET", "wait_for_previous": true}'))
    calls, finish = stream_tool_calls(olp, QUESTION)
    assert finish == "tool_calls"
    assert [c["name"] for _, c in sorted(calls.items())] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}
    assert json.loads(calls[1]["arguments"]) == {"tz": "CET"}  # not the CLI's parameter
    ids = [c["id"] for c in calls.values()]
    assert all(i.startswith("call_") for i in ids) and len(set(ids)) == 2
    assert len(model_requests(upstream)) == 1  # the calls ended the run: no second turn
    assert processes.none_left()


def test_parallel_tool_calls_false_answers_one_call(
    olp: ThreadServer, processes: CliProcesses, upstream: ResponsesGeminiUpstream
) -> None:
    upstream.script(weather_and_time(PREFIX))
    weather_call(ask(olp, QUESTION, tools=[WEATHER, CLOCK], parallel_tool_calls=False))
    assert processes.none_left()


def test_tool_choice_none_offers_no_tools(
    olp: ThreadServer, processes: CliProcesses, upstream: ResponsesGeminiUpstream
) -> None:
    assert_tool_choice_none_answers_in_text(olp, upstream, QUESTION)
    [request] = model_requests(upstream)
    assert gemini_tool_names(request) == []
    assert processes.none_left()


def test_a_hop_that_cannot_honour_tool_choice_is_skipped(
    olp: ThreadServer, upstream: ResponsesGeminiUpstream
) -> None:
    assert_unhonoured_tool_choice_skips_the_hop(olp, upstream, QUESTION)


# -- tool arguments and the turn bound ----------------------------------------------------


def test_arguments_off_the_tools_schema_go_back_to_the_model_once(
    olp: ThreadServer, processes: CliProcesses, upstream: ResponsesGeminiUpstream
) -> None:
    weather = f"{PREFIX}get_weather"
    upstream.script(ToolCalls([(weather, OFF_SCHEMA)]), ToolCalls([(weather, PARIS)]))
    weather_call(ask(olp, QUESTION, tools=[WEATHER]))
    _, retry = model_requests(upstream)
    # The CLI checks the arguments against the tool's schema itself, before the bridge
    # would: the model gets its error as the call's functionResponse.
    [response] = gemini_function_responses(retry)
    assert response["name"] == "mcp_olp_get_weather"
    assert response["response"] == {"error": "params/city must be string"}
    assert processes.none_left()


def test_arguments_off_the_schema_twice_is_an_error_that_says_so(
    olp: ThreadServer, processes: CliProcesses, upstream: ResponsesGeminiUpstream
) -> None:
    refuse_invalid_twice(olp, upstream, PREFIX)
    assert len(model_requests(upstream)) == 2
    assert processes.none_left()


def test_a_model_that_keeps_calling_a_missing_tool_is_bounded(
    olp: ThreadServer, processes: CliProcesses, upstream: ResponsesGeminiUpstream
) -> None:
    refuse_a_missing_tool(olp, upstream, PREFIX)
    assert len(model_requests(upstream)) == 2
    assert processes.none_left()


def test_a_client_that_leaves_mid_run_leaves_no_process(
    olp: ThreadServer, processes: CliProcesses, upstream: ResponsesGeminiUpstream
) -> None:
    upstream.script(Hang(60))
    # The CLI may ask the upstream to count tokens too: only the model's requests count.
    leave_mid_run(olp, upstream, QUESTION, processes, asked=lambda: len(model_requests(upstream)))
