"""Client tools over the real `codex` CLI (app-server) through OLP's MCP bridge, end to end.

The openai SDK talks to OLP; OLP runs the real Codex CLI with the request's tools served
to it over MCP; Codex talks to ResponsesGeminiUpstream (the OpenAI Responses API) on
127.0.0.1, which answers with `function_call` items for the tools the request offered and
then with text. What the upstream received shows what the model saw: the client's tools
(and the few of Codex's own that cannot be turned off), and on the follow-up, the tool
result. No Codex process may outlive a request (the process table is read after each).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from olp.config.model import ProviderConfig
from olp.providers.codex_cli import CodexCliProvider
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

from fakes.responses_gemini_upstream import (
    ResponsesGeminiUpstream,
    offered_names,
    requests_to,
    tool_outputs,
)
from fakes.upstream import FakeUpstream, Hang, Text, ToolCalls
from olp_server import ThreadServer

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]
# What Codex 0.171 offers besides the client's tools whenever an MCP server is configured:
# its MCP resource tools (docs/providers.md, codex-cli).
CODEX_OWN = ["list_mcp_resource_templates", "list_mcp_resources", "read_mcp_resource"]


@pytest.fixture(scope="module")
def codex() -> RealCli:
    return real_cli("codex")


@pytest.fixture(scope="module")
def processes(codex: RealCli) -> CliProcesses:
    """Codex's node launcher and the native binary it starts: both live in its package."""
    return CliProcesses((str(codex.command.resolve().parent.parent).encode(),))


@pytest.fixture
def responses() -> Iterator[ResponsesGeminiUpstream]:
    with ResponsesGeminiUpstream() as up:
        yield up


def config(
    codex: RealCli, responses: ResponsesGeminiUpstream, beta: FakeUpstream
) -> dict[str, Any]:
    env = {"OPENAI_BASE_URL": responses.openai_base_url, "OPENAI_API_KEY": "sk-fake-codex"}
    return tools_config("codex", codex, env, beta, provider={"warm": 0})


@pytest.fixture
def olp(
    tmp_path: Path,
    codex: RealCli,
    processes: CliProcesses,
    responses: ResponsesGeminiUpstream,
    beta: FakeUpstream,
) -> Iterator[ThreadServer]:
    with serve(tmp_path, config(codex, responses, beta), processes) as server:
        yield server


def model_requests(up: ResponsesGeminiUpstream) -> list[Any]:
    return requests_to(up, "/v1/responses")


def test_tool_call_then_the_result_gets_the_final_answer(
    olp: ThreadServer,
    processes: CliProcesses,
    responses: ResponsesGeminiUpstream,
    beta: FakeUpstream,
) -> None:
    responses.script(ToolCalls([("get_weather", PARIS)]), Text(FINAL))
    call = weather_call(ask(olp, QUESTION, tools=[WEATHER, CLOCK]))  # named with no namespace
    assert call.id == "call_fake_0"  # the model's own call id
    [offered] = model_requests(responses)
    assert offered_names(offered) == sorted(
        [*CODEX_OWN, "mcp__olp.get_time", "mcp__olp.get_weather"]
    )
    [namespace] = [t for t in offered.json["tools"] if t["type"] == "namespace"]
    schemas = {t["name"]: t["parameters"] for t in namespace["tools"]}
    assert schemas["get_weather"] == WEATHER["function"]["parameters"]
    assert "skills_instructions" not in json.dumps(offered.json["input"])
    assert processes.none_left()  # the run ended with the answer: nothing waits

    assert_the_result_gets_the_final_answer(olp, QUESTION, call)
    _, answered = model_requests(responses)
    assert RESULT in json.dumps(answered.json["input"])  # the model saw the result
    assert processes.none_left()
    assert beta.calls == 0


def test_streamed_tool_calls_in_parallel(
    olp: ThreadServer, processes: CliProcesses, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(weather_and_time(""))
    calls, finish = stream_tool_calls(olp, QUESTION)
    assert finish == "tool_calls"
    assert [(c["id"], c["name"]) for _, c in sorted(calls.items())] == [
        ("call_fake_0", "get_weather"),
        ("call_fake_1", "get_time"),
    ]
    assert json.loads(calls[1]["arguments"]) == {"tz": "CET"}
    assert len(model_requests(responses)) == 1
    assert processes.none_left()


def test_parallel_tool_calls_false_answers_one_call(
    olp: ThreadServer, processes: CliProcesses, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(weather_and_time(""))
    weather_call(ask(olp, QUESTION, tools=[WEATHER, CLOCK], parallel_tool_calls=False))
    assert processes.none_left()


def test_tool_choice_none_offers_no_tools(
    olp: ThreadServer, processes: CliProcesses, responses: ResponsesGeminiUpstream
) -> None:
    assert_tool_choice_none_answers_in_text(olp, responses, QUESTION)
    [request] = model_requests(responses)
    assert not [name for name in offered_names(request) if "get_weather" in name]
    assert not [name for name in offered_names(request) if "mcp" in name]
    assert processes.none_left()


def test_a_hop_that_cannot_honour_tool_choice_is_skipped(
    olp: ThreadServer, responses: ResponsesGeminiUpstream
) -> None:
    assert_unhonoured_tool_choice_skips_the_hop(olp, responses, QUESTION)


def test_arguments_off_the_tools_schema_go_back_to_the_model_once(
    olp: ThreadServer, processes: CliProcesses, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(ToolCalls([("get_weather", OFF_SCHEMA)]), ToolCalls([("get_weather", PARIS)]))
    weather_call(ask(olp, QUESTION, tools=[WEATHER]))
    _, retry = model_requests(responses)
    [output] = tool_outputs(retry).values()
    assert "Invalid arguments for get_weather" in output
    assert "is not of type 'string'" in output
    assert processes.none_left()


def test_arguments_off_the_schema_twice_is_an_error_that_says_so(
    olp: ThreadServer, processes: CliProcesses, responses: ResponsesGeminiUpstream
) -> None:
    refuse_invalid_twice(olp, responses, "")
    assert len(model_requests(responses)) == 2
    assert processes.none_left()


def test_a_model_that_keeps_calling_a_missing_tool_is_bounded(
    olp: ThreadServer, processes: CliProcesses, responses: ResponsesGeminiUpstream
) -> None:
    refuse_a_missing_tool(olp, responses, "")
    # Codex answers a call of a tool it does not know itself, at once, and may have sent a
    # third request by the time OLP ends the run (docs/providers.md, codex-cli): no more.
    assert len(model_requests(responses)) in (2, 3)
    assert processes.none_left()


def test_doctor_says_codex_takes_client_tools(codex: RealCli) -> None:
    env = {"PATH": codex.path, "OPENAI_API_KEY": "sk-fake-codex"}
    provider = CodexCliProvider(
        ProviderConfig("codex", "codex-cli", command=str(codex.command), env=env)
    )
    health = asyncio.run(provider.health())
    assert health.ok, health
    assert health.checks[-1] == "client tools: yes, over MCP (tool_choice: auto, none)"
    assert "tools (client-side function calling)" not in provider.capabilities.drops


def test_a_client_that_leaves_mid_run_leaves_no_process(
    olp: ThreadServer, processes: CliProcesses, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(Hang(60))
    leave_mid_run(olp, responses, QUESTION, processes)


def test_shutdown_with_a_bridged_run_in_flight_leaves_no_process(
    tmp_path: Path,
    codex: RealCli,
    processes: CliProcesses,
    responses: ResponsesGeminiUpstream,
    beta: FakeUpstream,
) -> None:
    responses.script(Hang(60))
    shut_down_mid_run(tmp_path, config(codex, responses, beta), responses, QUESTION, processes)


# -- structured output --------------------------------------------------------------------

SUM_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}
ADD = [{"role": "user", "content": "2+2 as n"}]


def strict_sum(strict: bool) -> Any:
    return {
        "type": "json_schema",
        "json_schema": {"name": "sum", "schema": SUM_SCHEMA, "strict": strict},
    }


def test_a_strict_json_schema_is_codexs_output_schema_and_the_answer_is_checked(
    olp: ThreadServer, processes: CliProcesses, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(Text('{"n": 4}'))
    stream = client(olp).chat.completions.create(
        model="chat",
        messages=ADD,
        response_format=strict_sum(True),
        stream=True,  # type: ignore[arg-type]
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert json.loads(text) == {"n": 4}
    [request] = model_requests(responses)
    assert request.json["text"]["format"]["type"] == "json_schema"
    assert request.json["text"]["format"]["schema"] == SUM_SCHEMA
    assert "Respond with a single valid JSON" not in json.dumps(request.json)
    assert processes.none_left()


def test_an_answer_off_the_schema_is_an_error_that_says_so(
    olp: ThreadServer, processes: CliProcesses, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(Text('{"n": "four"}'))
    message = refusal(olp, ADD, response_format=strict_sum(True))
    assert "does not match the response_format schema" in message
    assert "'four' is not of type 'integer'" in message
    assert processes.none_left()


def test_a_schema_that_is_not_strict_stays_an_instruction(
    olp: ThreadServer, processes: CliProcesses, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(Text('{"n": 4}'))
    answer = ask(olp, ADD, response_format=strict_sum(False))
    assert json.loads(answer.choices[0].message.content or "") == {"n": 4}
    [request] = model_requests(responses)
    assert "format" not in request.json.get("text", {})
    assert "Respond with a single valid JSON object that conforms" in json.dumps(request.json)
