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
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from olp.config.model import ProviderConfig
from olp.providers.codex_cli import CodexCliProvider
from real_cli import RealCli, real_cli
from real_cli_chat import real_cli_config

from fakes.responses_gemini_upstream import (
    ResponsesGeminiUpstream,
    offered_names,
    requests_to,
    tool_outputs,
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
# What Codex 0.171 offers besides the client's tools whenever an MCP server is configured:
# its MCP resource tools (docs/providers.md, codex-cli).
CODEX_OWN = ["list_mcp_resource_templates", "list_mcp_resources", "read_mcp_resource"]


@pytest.fixture(scope="module")
def codex() -> RealCli:
    return real_cli("codex")


@pytest.fixture
def responses() -> Iterator[ResponsesGeminiUpstream]:
    with ResponsesGeminiUpstream() as up:
        yield up


def config(
    codex: RealCli, responses: ResponsesGeminiUpstream, beta: FakeUpstream
) -> dict[str, Any]:
    """Chain `chat`: the real CLI, then `beta`; chain `solo`: the real CLI alone."""
    beta.script(*[Text("from beta")] * 4)
    env = {"OPENAI_BASE_URL": responses.openai_base_url, "OPENAI_API_KEY": "sk-fake-codex"}
    conf = real_cli_config("codex", codex, env, beta, provider={"warm": 0})
    conf["routing"]["chains"]["solo"] = [{"provider": "real", "model": codex.model}]
    return conf


@pytest.fixture
def olp(
    tmp_path: Path, codex: RealCli, responses: ResponsesGeminiUpstream, beta: FakeUpstream
) -> Iterator[ThreadServer]:
    with olp_server(tmp_path, config(codex, responses, beta)) as server:
        yield server
    assert codex_processes(codex) == []  # shutdown left none either


def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)


def model_requests(up: ResponsesGeminiUpstream) -> list[Any]:
    return requests_to(up, "/v1/responses")


def codex_processes(real: RealCli) -> list[int]:
    """Live (not zombie) processes of the real codex package (its node launcher and the
    native binary it starts) descended from this test process (the OLP under test runs in
    a thread of it): other tests, in other workers, have their own."""
    package = str(real.command.resolve().parent.parent).encode()
    me = os.getpid()
    parents: dict[int, int] = {}
    candidates = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        parents[int(proc.name)] = int(ppid)
        if state != "Z" and any(package in arg for arg in argv[:2]):
            candidates.append(int(proc.name))
    return [pid for pid in candidates if _descends_from(pid, me, parents)]


def _descends_from(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    seen = set()
    while pid in parents and pid not in seen:
        seen.add(pid)
        pid = parents[pid]
        if pid == ancestor:
            return True
    return False


def no_codex_left(real: RealCli, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while codex_processes(real):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_tool_call_then_the_result_gets_the_final_answer(
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    responses.script(ToolCalls([("get_weather", '{"city": "Paris"}')]), Text(FINAL))
    first = client(olp).chat.completions.create(
        model="chat", messages=QUESTION, tools=[WEATHER, CLOCK]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    assert call.function.name == "get_weather"  # the client's own name, no namespace
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id == "call_fake_0"  # the model's own call id
    [offered] = model_requests(responses)
    assert offered_names(offered) == sorted(
        [*CODEX_OWN, "mcp__olp.get_time", "mcp__olp.get_weather"]
    )
    [namespace] = [t for t in offered.json["tools"] if t["type"] == "namespace"]
    schemas = {t["name"]: t["parameters"] for t in namespace["tools"]}
    assert schemas["get_weather"] == WEATHER["function"]["parameters"]  # type: ignore[index]
    assert "skills_instructions" not in json.dumps(offered.json["input"])
    assert no_codex_left(codex)  # the run ended with the answer: nothing waits

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
    _, answered = model_requests(responses)
    assert RESULT in json.dumps(answered.json["input"])  # the model saw the result
    assert no_codex_left(codex)
    assert beta.calls == 0


def test_streamed_tool_calls_in_parallel(
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(
        ToolCalls([("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "CET"}')])
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
    assert [(c["id"], c["name"]) for _, c in sorted(calls.items())] == [
        ("call_fake_0", "get_weather"),
        ("call_fake_1", "get_time"),
    ]
    assert json.loads(calls[1]["arguments"]) == {"tz": "CET"}
    assert len(model_requests(responses)) == 1
    assert no_codex_left(codex)


def test_parallel_tool_calls_false_answers_one_call(
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(
        ToolCalls([("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "CET"}')])
    )
    answer = client(olp).chat.completions.create(
        model="chat", messages=QUESTION, tools=[WEATHER, CLOCK], parallel_tool_calls=False
    )
    [call] = answer.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    assert answer.choices[0].finish_reason == "tool_calls"
    assert no_codex_left(codex)


def test_tool_choice_none_offers_no_tools(
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(Text("No tools needed."))
    answer = client(olp).chat.completions.create(
        model="chat", messages=QUESTION, tools=[WEATHER], tool_choice="none"
    )
    assert answer.choices[0].message.content == "No tools needed."
    assert answer.choices[0].message.tool_calls is None
    [request] = model_requests(responses)
    assert not [name for name in offered_names(request) if "get_weather" in name]
    assert not [name for name in offered_names(request) if "mcp" in name]
    assert no_codex_left(codex)


def test_a_hop_that_cannot_honour_tool_choice_is_skipped(
    olp: ThreadServer, responses: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    raw = client(olp).chat.completions.with_raw_response.create(
        model="chat", messages=QUESTION, tools=[WEATHER], tool_choice="required"
    )
    assert raw.parse().choices[0].message.content == "from beta"
    [hop] = json.loads(raw.headers["x-olp-fallback-detail"])
    assert (hop["provider"], hop["code"], hop["trigger"]) == ("real", "UNSUPPORTED", "skip")
    assert responses.calls == 0  # the CLI never ran


def test_arguments_off_the_tools_schema_go_back_to_the_model_once(
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(
        ToolCalls([("get_weather", '{"city": 75}')]),
        ToolCalls([("get_weather", '{"city": "Paris"}')]),
    )
    answer = client(olp).chat.completions.create(model="chat", messages=QUESTION, tools=[WEATHER])
    [call] = answer.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    _, retry = model_requests(responses)
    [output] = tool_outputs(retry).values()
    assert "Invalid arguments for get_weather" in output
    assert "is not of type 'string'" in output
    assert no_codex_left(codex)


def test_arguments_off_the_schema_twice_is_an_error_that_says_so(
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(*[ToolCalls([("get_weather", '{"city": 75}')])] * 4)
    with pytest.raises(openai.APIStatusError) as caught:
        client(olp).chat.completions.create(model="solo", messages=QUESTION, tools=[WEATHER])
    message = str(caught.value.body)
    assert "the model's tool call is invalid (after one retry" in message
    assert "get_weather: /city: 75 is not of type 'string'" in message
    assert len(model_requests(responses)) == 2
    assert no_codex_left(codex)


def test_a_model_that_keeps_calling_a_missing_tool_is_bounded(
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(*[ToolCalls([("launch_rockets", "{}")])] * 20)
    with pytest.raises(openai.APIStatusError) as caught:
        client(olp).chat.completions.create(model="solo", messages=QUESTION, tools=[WEATHER])
    assert "launch_rockets: not one of the request's tools" in str(caught.value.body)
    # Codex answers a call of a tool it does not know itself, at once, and may have sent a
    # third request by the time OLP ends the run (docs/providers.md, codex-cli): no more.
    assert len(model_requests(responses)) in (2, 3)
    assert no_codex_left(codex)


def test_doctor_says_codex_takes_client_tools(codex: RealCli) -> None:
    env = {"PATH": codex.path, "OPENAI_API_KEY": "sk-fake-codex"}
    provider = CodexCliProvider(
        ProviderConfig("codex", "codex-cli", command=str(codex.command), env=env)
    )
    health = asyncio.run(provider.health())
    assert health.ok, health
    assert health.checks[-1] == "client tools: yes, over MCP (tool_choice: auto, none)"
    assert "tools (client-side function calling)" not in provider.capabilities.drops


BODY = {"model": "chat", "messages": QUESTION, "tools": [WEATHER], "stream": True}
HEADERS = {"authorization": f"Bearer {OWNER_TOKEN}"}


def test_a_client_that_leaves_mid_run_leaves_no_process(
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(Hang(60))
    http = httpx.Client(timeout=60)

    def leave_early() -> None:
        with (
            pytest.raises(httpx.ReadTimeout),
            http.stream(
                "POST",
                f"{olp.base_url}/v1/chat/completions",
                json=BODY,
                headers=HEADERS,
                timeout=httpx.Timeout(60, read=8),
            ) as resp,
        ):
            for _ in resp.iter_bytes():
                pass

    thread = threading.Thread(target=leave_early)
    thread.start()
    assert responses.wait_for(lambda: responses.calls == 1, timeout=30)
    assert codex_processes(codex)  # running, waiting on the upstream
    thread.join(30)
    http.close()
    assert no_codex_left(codex, within_s=15)


def test_shutdown_with_a_bridged_run_in_flight_leaves_no_process(
    tmp_path: Path, codex: RealCli, responses: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    responses.script(Hang(60))

    def ask(server: ThreadServer) -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(
                f"{server.base_url}/v1/chat/completions", json=BODY, headers=HEADERS, timeout=60
            )

    with olp_server(tmp_path, config(codex, responses, beta)) as server:
        thread = threading.Thread(target=ask, args=(server,))
        thread.start()
        assert responses.wait_for(lambda: responses.calls == 1, timeout=30)
        assert codex_processes(codex)
    # Leaving the block shut OLP down with the CLI waiting on the upstream.
    assert no_codex_left(codex, within_s=15)
    thread.join(30)


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
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream
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
    assert no_codex_left(codex)


def test_an_answer_off_the_schema_is_an_error_that_says_so(
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(Text('{"n": "four"}'))
    with pytest.raises(openai.APIStatusError) as caught:
        client(olp).chat.completions.create(
            model="solo",
            messages=ADD,
            response_format=strict_sum(True),  # type: ignore[arg-type]
        )
    message = str(caught.value.body)
    assert "does not match the response_format schema" in message
    assert "'four' is not of type 'integer'" in message
    assert no_codex_left(codex)


def test_a_schema_that_is_not_strict_stays_an_instruction(
    olp: ThreadServer, codex: RealCli, responses: ResponsesGeminiUpstream
) -> None:
    responses.script(Text('{"n": 4}'))
    answer = client(olp).chat.completions.create(
        model="chat",
        messages=ADD,
        response_format=strict_sum(False),  # type: ignore[arg-type]
    )
    assert json.loads(answer.choices[0].message.content or "") == {"n": 4}
    [request] = model_requests(responses)
    assert "format" not in request.json.get("text", {})
    assert "Respond with a single valid JSON object that conforms" in json.dumps(request.json)
