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
SYSTEM = "You are terse. OLP-SYSTEM-MARKER"
QUESTION = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "What is the weather in Paris?"},
]
FINAL = "It is sunny in Paris."
RESULT = "sunny, 21 C (OLP-TOOL-RESULT)"


@pytest.fixture(scope="module")
def qwen() -> RealCli:
    return real_cli("qwen")


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        up.script(*[Text("from beta")] * 4)
        yield up


def config(qwen: RealCli, upstream: FakeUpstream, beta: FakeUpstream) -> dict[str, Any]:
    """Chain `chat`: the real CLI, then `beta`; chain `solo`: the real CLI alone."""
    env = {"OPENAI_BASE_URL": upstream.openai_base_url, "OPENAI_API_KEY": "sk-fake-qwen"}
    conf = real_cli_config("qwen", qwen, env, beta, provider={"consent": True})
    conf["routing"]["chains"]["solo"] = [{"provider": "real", "model": qwen.model}]
    return conf


@pytest.fixture
def olp(
    tmp_path: Path, qwen: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> Iterator[ThreadServer]:
    with olp_server(tmp_path, config(qwen, upstream, beta)) as server:
        yield server
    assert qwen_processes(qwen) == []  # shutdown left none either


def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)


def model_requests(up: FakeUpstream) -> list[dict[str, Any]]:
    return [r.json for r in up.requests if r.path == "/v1/chat/completions"]


def tool_names(body: dict[str, Any]) -> list[str]:
    return sorted(tool["function"]["name"] for tool in body.get("tools", []))


def qwen_processes(real: RealCli) -> list[int]:
    """Live (not zombie) processes running the real qwen script that descend from this
    test process (the OLP under test runs in a thread of it; Qwen Code relaunches itself
    in a child): other tests running at the same time, in other workers, have their own."""
    targets = {str(real.command).encode(), str(real.command.resolve()).encode()}
    parents: dict[int, int] = {}
    running: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        parents[int(proc.name)] = int(ppid)
        if state != "Z" and any(t in arg for t in targets for arg in argv[:3]):
            running.add(int(proc.name))
    return sorted(pid for pid in running if _descends_from(pid, os.getpid(), parents))


def _descends_from(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    while pid in parents and pid > 1:
        pid = parents[pid]
        if pid == ancestor:
            return True
    return False


def no_qwen_left(real: RealCli, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while qwen_processes(real):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_tool_call_then_the_result_gets_the_final_answer(
    olp: ThreadServer, qwen: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    upstream.script(ToolCalls([("mcp__olp__get_weather", '{"city": "Paris"}')]), Text(FINAL))
    first = client(olp).chat.completions.create(
        model="chat",
        messages=QUESTION,  # type: ignore[arg-type]
        tools=[WEATHER, CLOCK],  # type: ignore[list-item]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    assert call.function.name == "get_weather"  # the client's own name, no mcp__ prefix
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id == "call_fake_0"
    assert no_qwen_left(qwen)  # the run ended with the answer: nothing waits
    [offered] = model_requests(upstream)  # one request: no background one
    # Only the client's tools: none of Qwen Code's own, none deferred behind tool_search.
    assert tool_names(offered) == ["mcp__olp__get_time", "mcp__olp__get_weather"]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in offered["tools"]}
    assert schemas["mcp__olp__get_weather"] == WEATHER["function"]["parameters"]  # type: ignore[index]
    # The client's system prompt alone (no context file, output-language rule, memory
    # or deferred-tools section) and the question alone (no environment message first).
    assert offered["messages"][0] == {"role": "system", "content": SYSTEM}
    [asked] = offered["messages"][1:]
    assert "What is the weather in Paris?" in json.dumps(asked)

    follow_up = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": RESULT},
    ]
    second = client(olp).chat.completions.create(
        model="chat",
        messages=follow_up,  # type: ignore[arg-type]
        tools=[WEATHER, CLOCK],  # type: ignore[list-item]
    )
    assert second.choices[0].message.content == FINAL
    assert second.choices[0].finish_reason == "stop"
    _, answered = model_requests(upstream)
    assert RESULT in json.dumps(answered["messages"])  # the model saw the result
    assert no_qwen_left(qwen)
    assert beta.calls == 0


def test_streamed_tool_calls_in_parallel(
    olp: ThreadServer, qwen: RealCli, upstream: FakeUpstream
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
        model="chat",
        messages=QUESTION,  # type: ignore[arg-type]
        tools=[WEATHER, CLOCK],  # type: ignore[list-item]
        stream=True,
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
    [offered] = model_requests(upstream)
    assert tool_names(offered) == ["mcp__olp__get_time", "mcp__olp__get_weather"]
    assert no_qwen_left(qwen)


def test_parallel_tool_calls_false_answers_one_call(
    olp: ThreadServer, qwen: RealCli, upstream: FakeUpstream
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
        model="chat",
        messages=QUESTION,  # type: ignore[arg-type]
        tools=[WEATHER, CLOCK],  # type: ignore[list-item]
        parallel_tool_calls=False,
    )
    [call] = answer.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    assert answer.choices[0].finish_reason == "tool_calls"
    assert no_qwen_left(qwen)


def test_tool_choice_none_offers_no_tools(
    olp: ThreadServer, qwen: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(Text("No tools needed."))
    answer = client(olp).chat.completions.create(
        model="chat",
        messages=QUESTION,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="none",
    )
    assert answer.choices[0].message.content == "No tools needed."
    assert answer.choices[0].message.tool_calls is None
    [request] = model_requests(upstream)
    assert request.get("tools", []) == []
    assert no_qwen_left(qwen)


def test_a_hop_that_cannot_honour_tool_choice_is_skipped(
    olp: ThreadServer, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    raw = client(olp).chat.completions.with_raw_response.create(
        model="chat",
        messages=QUESTION,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
    )
    assert raw.parse().choices[0].message.content == "from beta"
    [hop] = json.loads(raw.headers["x-olp-fallback-detail"])
    assert (hop["provider"], hop["code"], hop["trigger"]) == ("real", "UNSUPPORTED", "skip")
    assert "tool_choice" in hop["message"]
    assert upstream.calls == 0  # the CLI never ran


def test_arguments_off_the_tools_schema_go_back_to_the_model_once(
    olp: ThreadServer, qwen: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(
        ToolCalls([("mcp__olp__get_weather", '{"city": 75}')]),
        ToolCalls([("mcp__olp__get_weather", '{"city": "Paris"}')]),
    )
    answer = client(olp).chat.completions.create(
        model="chat",
        messages=QUESTION,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
    )
    [call] = answer.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    _, retry = model_requests(upstream)
    # Qwen Code checks the arguments itself, before the bridge would, and says so.
    assert "params/city must be string" in json.dumps(retry["messages"][-1])
    assert no_qwen_left(qwen)


def test_arguments_off_the_schema_twice_is_an_error_that_says_so(
    olp: ThreadServer, qwen: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(*[ToolCalls([("mcp__olp__get_weather", '{"city": 75}')])] * 4)
    with pytest.raises(openai.APIStatusError) as caught:
        client(olp).chat.completions.create(
            model="solo",
            messages=QUESTION,  # type: ignore[arg-type]
            tools=[WEATHER],  # type: ignore[list-item]
        )
    message = str(caught.value.body)
    assert "the model's tool call is invalid (after one retry" in message
    assert "get_weather: /city: 75 is not of type 'string'" in message
    assert len(model_requests(upstream)) == 2
    assert no_qwen_left(qwen)


def test_a_model_that_keeps_calling_a_missing_tool_is_bounded(
    olp: ThreadServer, qwen: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(*[ToolCalls([("mcp__olp__launch_rockets", "{}")])] * 20)
    with pytest.raises(openai.APIStatusError) as caught:
        client(olp).chat.completions.create(
            model="solo",
            messages=QUESTION,  # type: ignore[arg-type]
            tools=[WEATHER],  # type: ignore[list-item]
        )
    assert "launch_rockets: not one of the request's tools" in str(caught.value.body)
    assert len(model_requests(upstream)) == 2
    assert no_qwen_left(qwen)


def test_a_client_that_leaves_mid_run_leaves_no_process(
    olp: ThreadServer, qwen: RealCli, upstream: FakeUpstream
) -> None:
    upstream.script(Hang(60))
    http = httpx.Client(timeout=60)
    # Qwen Code takes several seconds to connect to the bridge before it asks the
    # upstream: the client stays that long, then leaves while the upstream hangs.
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
                timeout=httpx.Timeout(60, read=25),
            ) as resp,
        ):
            for _ in resp.iter_bytes():
                pass

    thread = threading.Thread(target=leave_early)
    thread.start()
    assert upstream.wait_for(lambda: upstream.calls == 1, timeout=30)
    assert qwen_processes(qwen)  # running, waiting on the upstream
    thread.join(30)
    http.close()
    assert no_qwen_left(qwen, within_s=15)


def test_a_long_tool_name_qwen_code_shortens_comes_back_as_the_clients(
    olp: ThreadServer, qwen: RealCli, upstream: FakeUpstream
) -> None:
    name = "lookup_the_current_weather_conditions_for_a_given_city_x"
    tool = {"type": "function", "function": {**WEATHER["function"], "name": name}}  # type: ignore[dict-item]
    shortened = "mcp__olp__lookup_the_current___er_conditions_for_a_given_city_x"
    upstream.script(ToolCalls([(shortened, '{"city": "Paris"}')]))
    answer = client(olp).chat.completions.create(
        model="chat",
        messages=QUESTION,  # type: ignore[arg-type]
        tools=[tool],  # type: ignore[list-item]
    )
    [call] = answer.choices[0].message.tool_calls or []
    assert call.function.name == name
    [offered] = model_requests(upstream)
    assert tool_names(offered) == [shortened]  # what the model saw
    assert no_qwen_left(qwen)


def test_shutdown_with_a_bridged_run_in_flight_leaves_no_process(
    tmp_path: Path, qwen: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    upstream.script(Hang(60))
    body = {"model": "chat", "messages": QUESTION, "tools": [WEATHER], "stream": True}
    headers = {"authorization": f"Bearer {OWNER_TOKEN}"}

    def ask(server: ThreadServer) -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(
                f"{server.base_url}/v1/chat/completions", json=body, headers=headers, timeout=60
            )

    with olp_server(tmp_path, config(qwen, upstream, beta)) as server:
        thread = threading.Thread(target=ask, args=(server,))
        thread.start()
        assert upstream.wait_for(lambda: upstream.calls == 1, timeout=30)
        assert qwen_processes(qwen)
    # Leaving the block shut OLP down with the CLI waiting on the upstream.
    assert no_qwen_left(qwen, within_s=15)
    thread.join(30)
