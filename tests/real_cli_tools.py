"""Client tools over a real CLI through OLP's MCP bridge: what the end-to-end tool tests
(tests/test_real_<cli>_tools.py) share.

    processes = CliProcesses.of(real)
    with serve(tmp_path, tools_config("claude", real, env, beta), processes) as olp:
        call = weather_call(ask(olp, QUESTION, tools=[WEATHER, CLOCK]))
        assert_the_result_gets_the_final_answer(olp, QUESTION, call)
        assert processes.none_left()

What the client sees is the same for every CLI: the tools below, the calls and answers in
OpenAI's shape, and no CLI process outliving a request. What differs stays in each test:
the name its CLI gives a tool (scripted on the upstream) and the wire format in which the
upstream saw what the model saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionFunctionToolParam

from real_cli import RealCli
from real_cli_chat import real_cli_config

from fakes.upstream import FakeUpstream, Text, ToolCalls
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

__all__ = [
    "CLOCK",
    "FINAL",
    "NO_TOOLS",
    "OFF_SCHEMA",
    "PARIS",
    "QUESTION",
    "RESULT",
    "WEATHER",
    "CliProcesses",
    "ask",
    "assert_the_result_gets_the_final_answer",
    "assert_tool_choice_none_answers_in_text",
    "assert_unhonoured_tool_choice_skips_the_hop",
    "client",
    "leave_mid_run",
    "refusal",
    "refuse_a_missing_tool",
    "refuse_invalid_twice",
    "serve",
    "shut_down_mid_run",
    "stream_tool_calls",
    "tools_config",
    "weather_and_time",
    "weather_call",
]

WEATHER: ChatCompletionFunctionToolParam = {
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
CLOCK: ChatCompletionFunctionToolParam = {
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
NO_TOOLS = "No tools needed."
PARIS = '{"city": "Paris"}'  # get_weather's arguments
OFF_SCHEMA = '{"city": 75}'  # get_weather's arguments, off its schema


@dataclass(frozen=True)
class CliProcesses:
    """The live (not zombie) processes of one CLI that descend from this test process (the
    OLP under test runs in a thread of it; a CLI may start a copy of itself): other tests
    running at the same time, in other workers, have their own. A process is the CLI's
    when one of its first `argv_words` arguments contains one of `marks`."""

    marks: tuple[bytes, ...]
    argv_words: int = 2

    @classmethod
    def of(cls, real: RealCli) -> CliProcesses:
        """Those running the CLI's binary."""
        return cls((str(real.command.resolve()).encode(),))

    def running(self) -> list[int]:
        parents: dict[int, int] = {}
        found: list[int] = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue
            parents[int(proc.name)] = int(ppid)
            words = argv[: self.argv_words]
            if state != "Z" and any(mark in word for mark in self.marks for word in words):
                found.append(int(proc.name))
        return [pid for pid in found if _descends(pid, os.getpid(), parents)]

    def none_left(self, within_s: float = 10.0) -> bool:
        """Whether all of them are gone within `within_s` (a run's end reaps its CLI)."""
        deadline = time.monotonic() + within_s
        while self.running():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True


def _descends(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    seen = set()
    while pid not in seen and pid > 1:
        seen.add(pid)
        pid = parents.get(pid, 0)
        if pid == ancestor:
            return True
    return False


def tools_config(
    cli: str,
    real: RealCli,
    env: dict[str, str],
    beta: FakeUpstream,
    provider: Mapping[str, Any],
) -> dict[str, Any]:
    """Chain `chat`: the real CLI, then `beta` (scripted to answer "from beta"); chain
    `solo`: the real CLI alone."""
    beta.script(*[Text("from beta")] * 4)
    conf = real_cli_config(cli, real, env, beta, provider=provider)
    conf["routing"]["chains"]["solo"] = [{"provider": "real", "model": real.model}]
    return conf


@contextlib.contextmanager
def serve(
    tmp_path: Path, config: dict[str, Any], processes: CliProcesses
) -> Iterator[ThreadServer]:
    """OLP on `config`; once it has shut down, none of `processes` may be left."""
    with olp_server(tmp_path, config) as server:
        yield server
    assert processes.running() == []  # shutdown left none either


def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)


def ask(
    server: ThreadServer, messages: Any, *, model: str = "chat", **options: Any
) -> ChatCompletion:
    """A chat request, not streamed; `options` as the SDK takes them (tools=...)."""
    answer: ChatCompletion = client(server).chat.completions.create(
        model=model, messages=messages, **options
    )
    return answer


def refusal(server: ThreadServer, messages: Any, **options: Any) -> str:
    """The error body (as text) of a request on chain `solo` that must fail."""
    with pytest.raises(openai.APIStatusError) as caught:
        client(server).chat.completions.create(model="solo", messages=messages, **options)
    return str(caught.value.body)


def weather_and_time(prefix: str, time_arguments: str = '{"tz": "CET"}') -> ToolCalls:
    """The model's two calls at once, under the names its CLI gives the client's tools."""
    return ToolCalls([(f"{prefix}get_weather", PARIS), (f"{prefix}get_time", time_arguments)])


def weather_call(answer: ChatCompletion) -> Any:
    """The answer's one tool call, which must be get_weather for Paris under the client's
    own name (whatever name the CLI gave the tool)."""
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    return call


def assert_the_result_gets_the_final_answer(server: ThreadServer, question: Any, call: Any) -> None:
    """The follow-up: the question, the assistant's `call` and RESULT for it, the same tools
    offered; the upstream was scripted to answer FINAL."""
    follow_up = [
        *question,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": RESULT},
    ]
    second = ask(server, follow_up, tools=[WEATHER, CLOCK])
    assert second.choices[0].message.content == FINAL
    assert second.choices[0].finish_reason == "stop"


def stream_tool_calls(
    server: ThreadServer, messages: Any
) -> tuple[dict[int, dict[str, str]], str | None]:
    """A streamed request offering WEATHER and CLOCK: its tool calls by index, each put
    together from its deltas (id, name, arguments), and the finish reason."""
    stream = client(server).chat.completions.create(
        model="chat", messages=messages, tools=[WEATHER, CLOCK], stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        if not chunk.choices:
            continue
        for piece in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += piece.id or ""
            if piece.function is not None:
                call["name"] += piece.function.name or ""
                call["arguments"] += piece.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return calls, finish


def assert_tool_choice_none_answers_in_text(
    server: ThreadServer, upstream: FakeUpstream, messages: Any
) -> None:
    upstream.script(Text(NO_TOOLS))
    answer = ask(server, messages, tools=[WEATHER], tool_choice="none")
    assert answer.choices[0].message.content == NO_TOOLS
    assert answer.choices[0].message.tool_calls is None


def assert_unhonoured_tool_choice_skips_the_hop(
    server: ThreadServer, upstream: FakeUpstream, messages: Any
) -> None:
    """tool_choice "required", which no CLI can promise: chain `chat` goes on to `beta`
    without running the CLI, and says why."""
    raw = client(server).chat.completions.with_raw_response.create(
        model="chat", messages=messages, tools=[WEATHER], tool_choice="required"
    )
    assert raw.parse().choices[0].message.content == "from beta"
    [hop] = json.loads(raw.headers["x-olp-fallback-detail"])
    assert (hop["provider"], hop["code"], hop["trigger"]) == ("real", "UNSUPPORTED", "skip")
    assert "tool_choice" in hop["message"]
    assert upstream.calls == 0  # the CLI never ran


def refuse_invalid_twice(server: ThreadServer, upstream: FakeUpstream, prefix: str) -> None:
    """The model calls get_weather (under the CLI's `prefix`) off its schema, and again
    after the retry with the error: the request fails with an error that says so."""
    upstream.script(*[ToolCalls([(f"{prefix}get_weather", OFF_SCHEMA)])] * 4)
    message = refusal(server, QUESTION, tools=[WEATHER])
    assert "the model's tool call is invalid (after one retry" in message
    assert "get_weather: /city: 75 is not of type 'string'" in message


def refuse_a_missing_tool(server: ThreadServer, upstream: FakeUpstream, prefix: str) -> None:
    """The model keeps calling a tool the request does not have: the run is bounded, and
    the request fails naming the tool."""
    upstream.script(*[ToolCalls([(f"{prefix}launch_rockets", "{}")])] * 20)
    message = refusal(server, QUESTION, tools=[WEATHER])
    assert "launch_rockets: not one of the request's tools" in message


def _streamed(messages: Any) -> dict[str, Any]:
    return {"model": "chat", "messages": messages, "tools": [WEATHER], "stream": True}


HEADERS = {"authorization": f"Bearer {OWNER_TOKEN}"}


def leave_mid_run(
    server: ThreadServer,
    upstream: FakeUpstream,
    messages: Any,
    processes: CliProcesses,
    *,
    asked: Callable[[], int] | None = None,
) -> None:
    """A streamed request whose client leaves (closes its connection) once the CLI waits
    on the upstream (scripted to hang) for the answer to its first model request (`asked`
    counts them; by default every request the upstream got is one): then the CLI must go."""
    count = asked or (lambda: upstream.calls)
    body = json.dumps(_streamed(messages)).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: olp\r\n"
        f"Authorization: {HEADERS['authorization']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as client:
        client.sendall(head.encode() + body)
        assert upstream.wait_for(lambda: count() == 1, timeout=30)
        assert processes.running()  # running, waiting on the upstream
    assert processes.none_left(within_s=15)


def shut_down_mid_run(
    tmp_path: Path,
    config: dict[str, Any],
    upstream: FakeUpstream,
    messages: Any,
    processes: CliProcesses,
) -> None:
    """OLP on `config` shut down while a streamed request's CLI waits on the upstream
    (scripted to hang): the shutdown must end the CLI."""

    def ask_streamed(server: ThreadServer) -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(
                f"{server.base_url}/v1/chat/completions",
                json=_streamed(messages),
                headers=HEADERS,
                timeout=60,
            )

    with olp_server(tmp_path, config) as server:
        thread = threading.Thread(target=ask_streamed, args=(server,))
        thread.start()
        assert upstream.wait_for(lambda: upstream.calls == 1, timeout=30)
        assert processes.running()
    # Leaving the block shut OLP down with the CLI waiting on the upstream.
    assert processes.none_left(within_s=15)
    thread.join(30)
