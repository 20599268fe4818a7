"""Client tools over the real `claude` CLI through OLP's MCP bridge, end to end.

The openai SDK talks to OLP; OLP runs the real Claude Code CLI with the request's tools
served to it over MCP; the CLI talks to FakeUpstream (Anthropic Messages) on 127.0.0.1,
which answers with the scripted tool calls and then with text. What the upstream received
shows what the model saw: only the client's tools, and on the follow-up, the tool result.
No CLI process may outlive a request (the process table is read after each).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
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
    client,
    leave_mid_run,
    refusal,
    refuse_a_missing_tool,
    refuse_invalid_twice,
    serve,
    shut_down_mid_run,
    stream_tool_calls,
    tools_config,
    weather_and_time,
    weather_call,
)

from fakes.upstream import FakeUpstream, Hang, Text, ToolCalls
from olp_server import ThreadServer

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]
PREFIX = "mcp__olp__"  # what Claude Code puts before the name of a tool from MCP server `olp`


@pytest.fixture(scope="module")
def claude() -> RealCli:
    return real_cli("claude")


@pytest.fixture(scope="module")
def processes(claude: RealCli) -> CliProcesses:
    return CliProcesses.of(claude)


def config(claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream) -> dict[str, Any]:
    env = {"ANTHROPIC_BASE_URL": upstream.base_url, "ANTHROPIC_API_KEY": "sk-ant-fake"}
    # No process started ahead: `processes.none_left()` checks that a run's CLI is gone.
    return tools_config("claude", claude, env, beta, provider={"consent": True, "warm": 0})


@pytest.fixture
def olp(
    tmp_path: Path,
    claude: RealCli,
    processes: CliProcesses,
    upstream: FakeUpstream,
    beta: FakeUpstream,
) -> Iterator[ThreadServer]:
    with serve(tmp_path, config(claude, upstream, beta), processes) as server:
        yield server


def model_requests(up: FakeUpstream) -> list[dict[str, Any]]:
    return [r.json for r in up.requests if r.path == "/v1/messages"]


def tool_names(body: dict[str, Any]) -> list[str]:
    return sorted(tool["name"] for tool in body.get("tools", []))


def test_tool_call_then_the_result_gets_the_final_answer(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    upstream.script(ToolCalls([(f"{PREFIX}get_weather", PARIS)]), Text(FINAL))
    call = weather_call(ask(olp, QUESTION, tools=[WEATHER, CLOCK]))  # named with no mcp__ prefix
    assert call.id == "toolu_fake_0"
    [offered] = model_requests(upstream)
    assert tool_names(offered) == ["mcp__olp__get_time", "mcp__olp__get_weather"]
    schemas = {t["name"]: t["input_schema"] for t in offered["tools"]}
    assert schemas["mcp__olp__get_weather"] == WEATHER["function"]["parameters"]
    assert processes.none_left()  # the run ended with the answer: nothing waits

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
        ("toolu_fake_0", "get_weather"),
        ("toolu_fake_1", "get_time"),
    ]
    assert json.loads(calls[1]["arguments"]) == {"tz": "CET"}
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
    assert request["tools"] == []
    assert processes.none_left()


def test_a_hop_that_cannot_honour_tool_choice_is_skipped(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    assert_unhonoured_tool_choice_skips_the_hop(olp, upstream, QUESTION)


def test_no_hop_can_honour_it_is_a_400_naming_the_field(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        ask(
            olp,
            QUESTION,
            model="solo",
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["code"] == "unsupported_request"
    assert error["param"] == "tool_choice"
    assert "`tool_choice`" in error["message"] and "real" in error["message"]
    assert upstream.calls == 0


def test_a_client_that_leaves_mid_run_leaves_no_process(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    upstream.script(Hang(60))
    leave_mid_run(olp, upstream, QUESTION, processes)


# -- structured output --------------------------------------------------------------------

SUM = {
    "type": "json_schema",
    "json_schema": {
        "name": "sum",
        "schema": {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    },
}
ADD = [{"role": "user", "content": "2+2 as n"}]


def test_json_schema_uses_the_clis_structured_output(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    upstream.script(ToolCalls([("StructuredOutput", '{"n": 4}')], text="Let me answer."))
    answer = ask(olp, ADD, response_format=SUM)
    assert json.loads(answer.choices[0].message.content or "") == {"n": 4}
    assert answer.choices[0].finish_reason == "stop"
    [request] = model_requests(upstream)
    [tool] = request["tools"]
    assert tool["name"] == "StructuredOutput"
    assert tool["input_schema"]["properties"] == {"n": {"type": "integer"}}
    assert "Respond with a single valid JSON" not in json.dumps(request["system"])
    assert processes.none_left()


def test_an_answer_off_the_schema_is_retried_once_with_the_error(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    upstream.script(
        ToolCalls([("StructuredOutput", '{"n": "four"}')]),
        ToolCalls([("StructuredOutput", '{"n": 4}')]),
    )
    stream = client(olp).chat.completions.create(
        model="chat",
        messages=ADD,  # type: ignore[arg-type]
        response_format=SUM,  # type: ignore[arg-type]
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert json.loads(text) == {"n": 4}
    _, retry = model_requests(upstream)
    assert "must be integer" in json.dumps(retry["messages"])  # the model saw the error
    assert processes.none_left()


def test_an_answer_off_the_schema_twice_is_an_error_that_says_so(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    upstream.script(*[ToolCalls([("StructuredOutput", '{"n": "four"}')])] * 3)
    message = refusal(olp, ADD, response_format=SUM)
    assert "does not match the response_format schema" in message
    assert "must be integer" in message
    assert len(model_requests(upstream)) == 2  # one retry, no more
    assert processes.none_left()


# -- tool arguments and the turn bound ----------------------------------------------------


def test_arguments_off_the_tools_schema_go_back_to_the_model_once(
    olp: ThreadServer, processes: CliProcesses, upstream: FakeUpstream
) -> None:
    weather = f"{PREFIX}get_weather"
    upstream.script(ToolCalls([(weather, OFF_SCHEMA)]), ToolCalls([(weather, PARIS)]))
    weather_call(ask(olp, QUESTION, tools=[WEATHER]))
    _, retry = model_requests(upstream)
    assert "Invalid arguments for get_weather" in json.dumps(retry["messages"])
    assert "is not of type 'string'" in json.dumps(retry["messages"])
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


def test_shutdown_with_a_bridged_run_in_flight_leaves_no_process(
    tmp_path: Path,
    claude: RealCli,
    processes: CliProcesses,
    upstream: FakeUpstream,
    beta: FakeUpstream,
) -> None:
    upstream.script(Hang(60))
    shut_down_mid_run(tmp_path, config(claude, upstream, beta), upstream, QUESTION, processes)
