"""The real `claude` CLI started ahead (the warm pool) through OLP, against FakeUpstream:
a warm request answers, two requests in a row never share a conversation, the pool
refills, a CLI started ahead for requests with client tools takes the tools of the
request it serves, and neither a config reload, a shutdown nor OLP being killed leaves a
CLI behind (checked in the process table: every process whose working directory is under
the sandboxes' base directory).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from real_cli import RealCli, real_cli
from real_cli_chat import SYSTEM, real_cli_config
from real_cli_tools import CLOCK, FINAL, PARIS, QUESTION, RESULT, WEATHER, ask, weather_call

from fakes.upstream import FakeUpstream, RecordedRequest, Text, ToolCalls
from olp_server import OWNER_TOKEN, ProcessServer, eventually, olp_server, write_config

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]

# Long enough for a CLI to start on a loaded 2-core machine.
START_S = 60.0


@pytest.fixture(scope="module")
def claude() -> RealCli:
    return real_cli("claude")


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture
def boxes(tmp_path: Path) -> Path:
    """OLP's TMPDIR: every CLI sandbox (and so every child's working directory) is here."""
    path = tmp_path / "boxes"
    path.mkdir()
    return path


def config(real: RealCli, up: FakeUpstream, beta: FakeUpstream, warm: int) -> dict[str, Any]:
    env = {"ANTHROPIC_BASE_URL": up.base_url, "ANTHROPIC_API_KEY": "sk-ant-fake"}
    return real_cli_config("claude", real, env, beta, provider={"warm": warm})


def children_in(base: Path, *, chats_only: bool = False) -> set[int]:
    """Live processes whose working directory is under `base` (zombies have none);
    `chats_only`: not the `claude --version` of a health check (the status page's)."""
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cwd.startswith(str(base) + os.sep) and not (chats_only and b"--version" in argv):
            pids.add(int(entry.name))
    return pids


def clis(base: Path) -> set[int]:
    return children_in(base, chats_only=True)


def chat(base_url: str, text: str) -> str:
    resp = httpx.post(
        f"{base_url}/v1/chat/completions",
        json={
            "model": "chat",
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": text},
            ],
        },
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        timeout=150,
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-olp-provider-used"] == "real"
    content: str = resp.json()["choices"][0]["message"]["content"]
    return content


def status(base_url: str) -> dict[str, Any]:
    resp = httpx.get(
        f"{base_url}/v0/management/status",
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        timeout=10,
    )
    value: dict[str, Any] = resp.json()
    return value


def warm(base_url: str) -> dict[str, Any]:
    [real] = [p for p in status(base_url)["providers"] if p["name"] == "real"]
    stats: dict[str, Any] = real["warm"]
    return stats


def model_requests(up: FakeUpstream) -> list[RecordedRequest]:
    return [r for r in up.requests if r.path == "/v1/messages"]


def test_a_warm_claude_answers_alone_and_the_pool_refills(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream, boxes: Path
) -> None:
    upstream.script(Text("One FIRST-ANSWER."), Text("Two."), Text("Three."))
    env = {"TMPDIR": str(boxes)}
    with olp_server(tmp_path, config(claude, upstream, beta, warm=1), env) as olp:
        assert chat(olp.base_url, "Say FIRST-MARKER.") == "One FIRST-ANSWER."
        # Started once the first request's CLI printed: it waits for the next prompt.
        assert eventually(lambda: warm(olp.base_url)["waiting"] == 1, START_S)
        waiting = clis(boxes)
        assert len(waiting) == 1
        assert chat(olp.base_url, "Say SECOND-MARKER.") == "Two."
        assert waiting.isdisjoint(clis(boxes))  # it served one request, and ended
        stats = warm(olp.base_url)
        assert (stats["size"], stats["hits"], stats["misses"]) == (1, 1, 1)
        assert stats["warm_start_ms_p50"] is not None
        assert stats["cold_start_ms_p50"] is not None
        # The pool refills after a hit too.
        assert eventually(lambda: warm(olp.base_url)["waiting"] == 1, START_S)
        assert chat(olp.base_url, "Say THIRD-MARKER.") == "Three."
        assert warm(olp.base_url)["hits"] == 2
    first, second, third = (json.dumps(r.json) for r in model_requests(upstream))
    # Each request is a conversation of its own, with the client's system prompt.
    assert "FIRST-MARKER" in first and "FIRST-MARKER" not in second + third
    assert "FIRST-ANSWER" not in second + third
    assert "SECOND-MARKER" in second and "SECOND-MARKER" not in third
    for body in (first, second, third):
        assert "OLP-SYSTEM-MARKER" in body
    assert children_in(boxes) == set()
    assert list(boxes.iterdir()) == []  # every sandbox removed


def test_a_claude_started_ahead_takes_the_tools_of_the_request_it_serves(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream, boxes: Path
) -> None:
    time_call = ToolCalls([("mcp__olp__get_time", '{"tz": "CET"}')])
    upstream.script(ToolCalls([("mcp__olp__get_weather", PARIS)]), time_call, Text(FINAL))
    env = {"TMPDIR": str(boxes)}
    with olp_server(tmp_path, config(claude, upstream, beta, warm=1), env) as olp:
        weather_call(ask(olp, QUESTION, tools=[WEATHER]))  # nothing waited: a cold start
        # Started with the bridge and no tools: whatever tools the next request has.
        assert eventually(lambda: warm(olp.base_url)["waiting"] == 1, START_S)
        [call] = ask(olp, QUESTION, tools=[CLOCK]).choices[0].message.tool_calls or []
        assert (call.id, call.function.name) == ("toolu_fake_0", "get_time")
        assert eventually(lambda: warm(olp.base_url)["waiting"] == 1, START_S)
        follow_up = [
            *QUESTION,
            {"role": "assistant", "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": RESULT},
        ]
        final = ask(olp, follow_up, tools=[CLOCK])
        assert final.choices[0].message.content == FINAL
        stats = warm(olp.base_url)
        assert (stats["hits"], stats["misses"]) == (2, 1)
    offered = [sorted(t["name"] for t in r.json["tools"]) for r in model_requests(upstream)]
    # Each run's model saw exactly its request's tools, also those started ahead.
    assert offered == [["mcp__olp__get_weather"], ["mcp__olp__get_time"], ["mcp__olp__get_time"]]
    assert RESULT in json.dumps(model_requests(upstream)[2].json["messages"])
    assert children_in(boxes) == set()
    assert list(boxes.iterdir()) == []


def process_server(
    tmp_path: Path, boxes: Path, config: dict[str, Any]
) -> tuple[ProcessServer, Path]:
    home = tmp_path / "olp-home"
    write_config(home, config)
    owner = tmp_path / "owner"  # not the machine's real home: no login of its own
    owner.mkdir(exist_ok=True)
    env = {"TMPDIR": str(boxes), "HOME": str(owner), "OLP_LOG_LEVEL": "info"}
    return ProcessServer(home, env), home


def test_a_config_reload_and_a_shutdown_leave_no_claude_behind(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream, boxes: Path
) -> None:
    server, home = process_server(tmp_path, boxes, config(claude, upstream, beta, warm=2))
    with server as olp:
        assert chat(olp.base_url, "Say one.")
        assert eventually(lambda: warm(olp.base_url)["waiting"] == 2, START_S)
        # (The CLI that answered may take a moment to exit once it is told to.)
        assert eventually(lambda: len(clis(boxes)) == 2, 15)
        old = clis(boxes)
        # A changed provider is replaced: its waiting CLIs go at once, not after total_ms.
        write_config(home, config(claude, upstream, beta, warm=1))
        assert eventually(lambda: status(olp.base_url)["config"]["reloads"] == 1, 10)
        assert eventually(lambda: old.isdisjoint(clis(boxes)), 15)
        assert chat(olp.base_url, "Say two.")
        assert eventually(lambda: warm(olp.base_url)["waiting"] == 1, START_S)
        assert eventually(lambda: len(clis(boxes)) == 1, 15)
        olp.terminate(signal.SIGTERM)
        assert olp.proc is not None
        olp.proc.wait(timeout=30)
    assert children_in(boxes) == set()


def test_killed_olp_takes_its_waiting_claude_along(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream, boxes: Path
) -> None:
    server, _ = process_server(tmp_path, boxes, config(claude, upstream, beta, warm=1))
    with server as olp:
        assert chat(olp.base_url, "Say one.")
        assert eventually(lambda: len(clis(boxes)) == 1, START_S)
        olp.terminate(signal.SIGKILL)  # no cleanup of its own: the parent-death signal
        assert olp.proc is not None
        olp.proc.wait(timeout=10)
        assert eventually(lambda: children_in(boxes) == set(), 10)
