"""Client tools over the real `qwen` CLI through OLP's MCP bridge, end to end.

The openai SDK talks to OLP; OLP runs the real Qwen Code CLI (without `--bare`, which
loads no MCP server, and with OLP's own settings in its private HOME instead) with the
request's tools served to it over MCP; the CLI talks to FakeUpstream (OpenAI chat
completions) on 127.0.0.1, which answers with the scripted tool calls and then with text.
What the upstream received shows what the model saw: only the client's tools, the
client's system prompt alone, one request per answer (no background request), and on the
follow-up, the tool result. No CLI process may outlive a request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from real_cli import RealCli, real_cli
from real_cli_chat import SYSTEM
from real_cli_tools import (
    CLOCK,
    FINAL,
    OFF_SCHEMA,
    PARIS,
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
    shut_down_mid_run,
    stream_tool_calls,
    tools_config,
    weather_and_time,
    weather_call,
)
from real_cli_tools import QUESTION as ASKED

from fakes.upstream import FakeUpstream, Hang, Text, ToolCalls
from olp_server import ThreadServer

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]
PREFIX = "mcp__olp__"  # what Qwen Code puts before the name of a tool from MCP server `olp`
QUESTION = [{"role": "system", "content": SYSTEM}, *ASKED]


@pytest.fixture(scope="module")
def qwen() -> RealCli:
    return real_cli("qwen")


@pytest.fixture(scope="module")
def processes(qwen: RealCli) -> CliProcesses:
    """The qwen script, by the path installed or the one it resolves to, in the first three
    words of a command line (Qwen Code relaunches itself in a child)."""
    marks = (str(qwen.command).encode(), str(qwen.command.resolve()).encode())
    return CliProcesses(marks, argv_words=3)


def config(qwen: RealCli, upstream: FakeUpstream, beta: FakeUpstream) -> dict[str, Any]:
    env = {"OPENAI_BASE_URL": upstream.openai_base_url, "OPENAI_API_KEY": "sk-fake-qwen"}
    return tools_config("qwen", qwen, env, beta, provider={"consent": True})


@pytest.fixture
def olp(
    tmp_path: Path,
    qwen: RealCli,
    processes: CliProcesses,
    upstream: FakeUpstream,
    beta: FakeUpstream,
) -> Iterator[ThreadServer]:
    with serve(tmp_path, config(qwen, upstream, beta), processes) as server:
        yield server


def model_requests(up: FakeUpstream) -> list[dict[str, Any]]:
    return [r.json for r in up.requests if r.path == "/v1/chat/completions"]


def tool_names(body: dict[str, Any]) -> list[str]:
    return sorted(tool["function"]["name"] for tool in body.get("tools", []))


def test_tool_call_then_the_result_gets_the_final_answer(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    upstream.script(ToolCalls([(f"{PREFIX}get_weather", PARIS)]), Text(FINAL))
    call = weather_call(ask(olp, QUESTION, tools=[WEATHER, CLOCK]))  # named with no mcp__ prefix
    assert call.id == "call_fake_0"
    assert processes.none_left()  # the run ended with the answer: nothing waits
    [offered] = model_requests(upstream)  # one request: no background one
    # Only the client's tools: none of Qwen Code's own, none deferred behind tool_search.
    assert tool_names(offered) == ["mcp__olp__get_time", "mcp__olp__get_weather"]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in offered["tools"]}
    assert schemas["mcp__olp__get_weather"] == WEATHER["function"]["parameters"]
    # The client's system prompt alone (no context file, output-language rule, memory
    # or deferred-tools section) and the question alone (no environment message first).
    assert offered["messages"][0] == {"role": "system", "content": SYSTEM}
    [asked] = offered["messages"][1:]
    assert "What is the weather in Paris?" in json.dumps(asked)

    assert_the_result_gets_the_final_answer(olp, QUESTION, call)
    _, answered = model_requests(upstream)
    assert RESULT in json.dumps(answered["messages"])  # the model saw the result
    assert processes.none_left()
    assert beta.calls == 0


def test_streamed_tool_calls_in_parallel(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    upstream.script(weather_and_time(PREFIX))
    calls, finish = stream_tool_calls(olp, QUESTION)
    assert finish == "tool_calls"
    assert [(c["id"], c["name"]) for _, c in sorted(calls.items())] == [
        ("call_fake_0", "get_weather"),
        ("call_fake_1", "get_time"),
    ]
    assert json.loads(calls[1]["arguments"]) == {"tz": "CET"}
    [offered] = model_requests(upstream)
    assert tool_names(offered) == ["mcp__olp__get_time", "mcp__olp__get_weather"]
    assert processes.none_left()


def test_parallel_tool_calls_false_answers_one_call(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    upstream.script(weather_and_time(PREFIX))
    weather_call(ask(olp, QUESTION, tools=[WEATHER, CLOCK], parallel_tool_calls=False))
    assert processes.none_left()


def test_tool_choice_none_offers_no_tools(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    assert_tool_choice_none_answers_in_text(olp, upstream, QUESTION)
    [request] = model_requests(upstream)
    assert request.get("tools", []) == []
    assert processes.none_left()


def test_a_hop_that_cannot_honour_tool_choice_is_skipped(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    assert_unhonoured_tool_choice_skips_the_hop(olp, upstream, QUESTION)


def test_arguments_off_the_tools_schema_go_back_to_the_model_once(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    weather = f"{PREFIX}get_weather"
    upstream.script(ToolCalls([(weather, OFF_SCHEMA)]), ToolCalls([(weather, PARIS)]))
    weather_call(ask(olp, QUESTION, tools=[WEATHER]))
    _, retry = model_requests(upstream)
    # Qwen Code checks the arguments itself, before the bridge would, and says so.
    assert "params/city must be string" in json.dumps(retry["messages"][-1])
    assert processes.none_left()


def test_arguments_off_the_schema_twice_is_an_error_that_says_so(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    refuse_invalid_twice(olp, upstream, PREFIX)
    assert len(model_requests(upstream)) == 2
    assert processes.none_left()


def test_a_model_that_keeps_calling_a_missing_tool_is_bounded(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    refuse_a_missing_tool(olp, upstream, PREFIX)
    assert len(model_requests(upstream)) == 2
    assert processes.none_left()


def test_a_client_that_leaves_mid_run_leaves_no_process(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    upstream.script(Hang(60))
    leave_mid_run(olp, upstream, QUESTION, processes)


def test_a_long_tool_name_qwen_code_shortens_comes_back_as_the_clients(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    name = "lookup_the_current_weather_conditions_for_a_given_city_x"
    tool = {"type": "function", "function": {**WEATHER["function"], "name": name}}
    shortened = "mcp__olp__lookup_the_current___er_conditions_for_a_given_city_x"
    upstream.script(ToolCalls([(shortened, PARIS)]))
    answer = ask(olp, QUESTION, tools=[tool])
    [call] = answer.choices[0].message.tool_calls or []
    assert call.function.name == name
    [offered] = model_requests(upstream)
    assert tool_names(offered) == [shortened]  # what the model saw
    assert processes.none_left()


def test_shutdown_with_a_bridged_run_in_flight_leaves_no_process(
    tmp_path: Path,
    qwen: RealCli,
    processes: CliProcesses,
    upstream: FakeUpstream,
    beta: FakeUpstream,
) -> None:
    upstream.script(Hang(60))
    shut_down_mid_run(tmp_path, config(qwen, upstream, beta), upstream, QUESTION, processes)
