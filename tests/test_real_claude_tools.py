"""Client tools over the real `claude` CLI through OLP's MCP bridge, end to end.

The openai SDK talks to OLP; OLP runs the real Claude Code CLI with the request's tools
served to it over MCP; the CLI talks to FakeUpstream (Anthropic Messages) on 127.0.0.1,
which answers with the scripted tool calls and then with text. What the upstream received
shows what the model saw: only the client's tools, and on the follow-up, the tool result.
No CLI process may outlive a request (the process table is read after each).
"""

from __future__ import annotations

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

from real_cli import RealCli, real_cli
from real_cli_chat import real_cli_config

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
def claude() -> RealCli:
    return real_cli("claude")


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        up.script(*[Text("from beta")] * 4)
        yield up


def config(claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream) -> dict[str, Any]:
    """Chain `chat`: the real CLI, then `beta`; chain `solo`: the real CLI alone."""
    env = {"ANTHROPIC_BASE_URL": upstream.base_url, "ANTHROPIC_API_KEY": "sk-ant-fake"}
    # No process started ahead: `no_claude_left` checks that a run's CLI is gone.
    provider = {"consent": True, "warm": 0}
    conf = real_cli_config("claude", claude, env, beta, provider=provider)
    conf["routing"]["chains"]["solo"] = [{"provider": "real", "model": claude.model}]
    return conf


@pytest.fixture
def olp(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> Iterator[ThreadServer]:
    with olp_server(tmp_path, config(claude, upstream, beta)) as server:
        yield server
    assert claude_processes(claude) == []  # shutdown left none either


def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)


def model_requests(up: FakeUpstream) -> list[dict[str, Any]]:
    return [r.json for r in up.requests if r.path == "/v1/messages"]


def tool_names(body: dict[str, Any]) -> list[str]:
    return sorted(tool["name"] for tool in body.get("tools", []))


def claude_processes(real: RealCli) -> list[int]:
    """Live (not zombie) processes running the real claude binary that this test process
    started (the OLP under test runs in a thread of it): other tests running at the same
    time, in other workers, have their own."""
    target = str(real.command.resolve())
    me = os.getpid()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if state != "Z" and int(ppid) == me and any(target.encode() in arg for arg in argv[:2]):
            found.append(int(proc.name))
    return found


def no_claude_left(real: RealCli, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while claude_processes(real):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_tool_call_then_the_result_gets_the_final_answer(
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    upstream.script(ToolCalls([("mcp__olp__get_weather", '{"city": "Paris"}')]), Text(FINAL))
    first = client(olp).chat.completions.create(
        model="chat", messages=QUESTION, tools=[WEATHER, CLOCK]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    assert call.function.name == "get_weather"  # the client's own name, no mcp__ prefix
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id == "toolu_fake_0"
    [offered] = model_requests(upstream)
    assert tool_names(offered) == ["mcp__olp__get_time", "mcp__olp__get_weather"]
    schemas = {t["name"]: t["input_schema"] for t in offered["tools"]}
    assert schemas["mcp__olp__get_weather"] == WEATHER["function"]["parameters"]  # type: ignore[index]
    assert no_claude_left(claude)  # the run ended with the answer: nothing waits

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
    assert RESULT in json.dumps(answered["messages"])  # the model saw the result
    assert no_claude_left(claude)
    assert beta.calls == 0


def test_streamed_tool_calls_in_parallel(
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(
        ToolCalls(
            [
                ("mcp__olp__get_weather", '{"city": "Paris"}'),
                ("mcp__olp__get_time", '{"tz": "CET"}'),
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
    assert [(c["id"], c["name"]) for _, c in sorted(calls.items())] == [
        ("toolu_fake_0", "get_weather"),
        ("toolu_fake_1", "get_time"),
    ]
    assert json.loads(calls[1]["arguments"]) == {"tz": "CET"}
    assert no_claude_left(claude)


def test_parallel_tool_calls_false_answers_one_call(
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(
        ToolCalls(
            [
                ("mcp__olp__get_weather", '{"city": "Paris"}'),
                ("mcp__olp__get_time", '{"tz": "CET"}'),
            ]
        )
    )
    answer = client(olp).chat.completions.create(
        model="chat", messages=QUESTION, tools=[WEATHER, CLOCK], parallel_tool_calls=False
    )
    [call] = answer.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    assert answer.choices[0].finish_reason == "tool_calls"
    assert no_claude_left(claude)


def test_tool_choice_none_offers_no_tools(
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(Text("No tools needed."))
    answer = client(olp).chat.completions.create(
        model="chat", messages=QUESTION, tools=[WEATHER], tool_choice="none"
    )
    assert answer.choices[0].message.content == "No tools needed."
    assert answer.choices[0].message.tool_calls is None
    [request] = model_requests(upstream)
    assert request["tools"] == []
    assert no_claude_left(claude)


def test_a_hop_that_cannot_honour_tool_choice_is_skipped(
    olp: ThreadServer, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    raw = client(olp).chat.completions.with_raw_response.create(
        model="chat", messages=QUESTION, tools=[WEATHER], tool_choice="required"
    )
    assert raw.parse().choices[0].message.content == "from beta"
    [hop] = json.loads(raw.headers["x-olp-fallback-detail"])
    assert (hop["provider"], hop["code"], hop["trigger"]) == ("real", "UNSUPPORTED", "skip")
    assert "tool_choice" in hop["message"]
    assert upstream.calls == 0  # the CLI never ran


def test_no_hop_can_honour_it_is_a_400_naming_the_field(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(olp).chat.completions.create(
            model="solo",
            messages=QUESTION,
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
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream
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
    assert upstream.wait_for(lambda: upstream.calls == 1, timeout=30)
    assert claude_processes(claude)  # running, waiting on the upstream
    thread.join(30)
    http.close()
    assert no_claude_left(claude, within_s=15)


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
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(ToolCalls([("StructuredOutput", '{"n": 4}')], text="Let me answer."))
    answer = client(olp).chat.completions.create(
        model="chat",
        messages=ADD,  # type: ignore[arg-type]
        response_format=SUM,  # type: ignore[arg-type]
    )
    assert json.loads(answer.choices[0].message.content or "") == {"n": 4}
    assert answer.choices[0].finish_reason == "stop"
    [request] = model_requests(upstream)
    [tool] = request["tools"]
    assert tool["name"] == "StructuredOutput"
    assert tool["input_schema"]["properties"] == {"n": {"type": "integer"}}
    assert "Respond with a single valid JSON" not in json.dumps(request["system"])
    assert no_claude_left(claude)


def test_an_answer_off_the_schema_is_retried_once_with_the_error(
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream
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
    assert no_claude_left(claude)


def test_an_answer_off_the_schema_twice_is_an_error_that_says_so(
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(*[ToolCalls([("StructuredOutput", '{"n": "four"}')])] * 3)
    with pytest.raises(openai.APIStatusError) as caught:
        client(olp).chat.completions.create(
            model="solo",
            messages=ADD,  # type: ignore[arg-type]
            response_format=SUM,  # type: ignore[arg-type]
        )
    message = str(caught.value.body)
    assert "does not match the response_format schema" in message
    assert "must be integer" in message
    assert len(model_requests(upstream)) == 2  # one retry, no more
    assert no_claude_left(claude)


# -- tool arguments and the turn bound ----------------------------------------------------


def test_arguments_off_the_tools_schema_go_back_to_the_model_once(
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(
        ToolCalls([("mcp__olp__get_weather", '{"city": 75}')]),
        ToolCalls([("mcp__olp__get_weather", '{"city": "Paris"}')]),
    )
    answer = client(olp).chat.completions.create(model="chat", messages=QUESTION, tools=[WEATHER])
    [call] = answer.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    _, retry = model_requests(upstream)
    assert "Invalid arguments for get_weather" in json.dumps(retry["messages"])
    assert "is not of type 'string'" in json.dumps(retry["messages"])
    assert no_claude_left(claude)


def test_arguments_off_the_schema_twice_is_an_error_that_says_so(
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(*[ToolCalls([("mcp__olp__get_weather", '{"city": 75}')])] * 4)
    with pytest.raises(openai.APIStatusError) as caught:
        client(olp).chat.completions.create(model="solo", messages=QUESTION, tools=[WEATHER])
    message = str(caught.value.body)
    assert "the model's tool call is invalid (after one retry" in message
    assert "get_weather: /city: 75 is not of type 'string'" in message
    assert len(model_requests(upstream)) == 2
    assert no_claude_left(claude)


def test_a_model_that_keeps_calling_a_missing_tool_is_bounded(
    olp: ThreadServer, claude: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(*[ToolCalls([("mcp__olp__launch_rockets", "{}")])] * 20)
    with pytest.raises(openai.APIStatusError) as caught:
        client(olp).chat.completions.create(model="solo", messages=QUESTION, tools=[WEATHER])
    assert "launch_rockets: not one of the request's tools" in str(caught.value.body)
    assert len(model_requests(upstream)) == 2
    assert no_claude_left(claude)


def test_shutdown_with_a_bridged_run_in_flight_leaves_no_process(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    upstream.script(Hang(60))
    body = {"model": "chat", "messages": QUESTION, "tools": [WEATHER], "stream": True}
    headers = {"authorization": f"Bearer {OWNER_TOKEN}"}

    def ask(server: ThreadServer) -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(
                f"{server.base_url}/v1/chat/completions", json=body, headers=headers, timeout=60
            )

    with olp_server(tmp_path, config(claude, upstream, beta)) as server:
        thread = threading.Thread(target=ask, args=(server,))
        thread.start()
        assert upstream.wait_for(lambda: upstream.calls == 1, timeout=30)
        assert claude_processes(claude)
    # Leaving the block shut OLP down with the CLI waiting on the upstream.
    assert no_claude_left(claude, within_s=15)
    thread.join(30)
