"""The warm pool of `CliRunner` against real tiny executables (Python scripts in a tmp dir):
a process started ahead serves one request and is replaced, keys never mix, the
deadlines count from the prompt, and nothing is left behind (tests/test_real_claude_warm.py
does the same with the real claude CLI)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from olp.config import load_config
from olp.config.model import ProviderConfig
from olp.errors import Failure, ProviderError
from olp.ir import Tool
from olp.providers._mcp_bridge import BridgedRun, ToolBridge
from olp.providers._subprocess import CliInvocation, CliRunner

PY_BIN = str(Path(sys.executable).parent)

# Reads its whole prompt, then says who it is and what it got.
ECHO = """#!/usr/bin/env python3
import json, os, sys, time
born = time.monotonic()
data = sys.stdin.buffer.read()
print(json.dumps({"pid": os.getpid(), "stdin": data.decode(), "home": os.environ["HOME"],
                  "waited_s": time.monotonic() - born}), flush=True)
"""


@pytest.fixture
def owner_home(tmp_path: Path) -> Path:
    home = tmp_path / "owner-home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"token": "owner"}')
    return home


@pytest.fixture
def make_config(tmp_path: Path, owner_home: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("HOME", str(owner_home))
    monkeypatch.setenv("OLP_HOME", str(tmp_path / "olp"))
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    monkeypatch.setenv("TMPDIR", str(boxes))

    def make(script: str = ECHO, **provider: Any) -> ProviderConfig:
        path = tmp_path / "cli"
        path.write_text(script)
        path.chmod(0o755)
        conf = {
            "type": "claude-cli",
            "command": str(path),
            "env": {"PATH": f"{PY_BIN}:{os.environ['PATH']}"},
            "timeouts": {"first_byte_ms": 5000, "idle_ms": 5000, "total_ms": 20000},
            **provider,
        }
        (tmp_path / "olp").mkdir(exist_ok=True)
        (tmp_path / "olp" / "config.json").write_bytes(orjson.dumps({"providers": {"cli": conf}}))
        return load_config().providers["cli"]

    return make


def poolable(prompt: str, key: str = "a") -> CliInvocation:
    return CliInvocation(
        args=("--key", key),
        stdin=prompt.encode(),
        credentials=((".claude/.credentials.json", ".claude/.credentials.json"),),
        waits_for_prompt=True,
    )


async def ask(runner: CliRunner, invocation: CliInvocation) -> dict[str, Any]:
    async with runner.spawn(invocation) as proc:
        lines: list[bytes] = []
        async for line in proc.lines():
            lines.append(line)
            proc.answered(len(lines))  # as a translation does: every line is the answer
            proc.content_delivered()  # as stream_cli does once it yielded content
        [line] = lines
        assert await proc.wait() == 0
    answer: dict[str, Any] = json.loads(line)
    return answer


async def until(predicate: Callable[[], bool], within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def waiting_pids(boxes: Path) -> set[int]:
    """Processes whose working directory is a sandbox under `boxes`."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd").startswith(str(boxes) + os.sep):
                    pids.add(int(entry.name))
            except OSError:
                continue
    return pids


def make_runner(config: ProviderConfig, warm: int, **kw: Any) -> CliRunner:
    return CliRunner("cli", config, default_command="fake-cli", warm=warm, **kw)


def test_a_waiting_process_serves_one_request_and_is_replaced(
    make_config: Any, tmp_path: Path
) -> None:
    async def main() -> None:
        runner = make_runner(make_config(), warm=1)
        try:
            first = await ask(runner, poolable("one"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            [ahead] = waiting_pids(tmp_path / "boxes")
            second = await ask(runner, poolable("two"))
            assert second["pid"] == ahead != first["pid"]
            assert second["stdin"] == "two"  # its own prompt, and nothing before it
            assert second["home"] != first["home"]  # a sandbox of its own
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            third = await ask(runner, poolable("three"))
            assert third["pid"] not in (first["pid"], second["pid"])  # never reused
            stats = runner.warm
            assert stats is not None
            assert (stats.hits, stats.misses, stats.size) == (2, 1, 1)
            assert stats.cold_start_ms_p50 is not None and stats.warm_start_ms_p50 is not None
        finally:
            await runner.aclose()
        assert waiting_pids(tmp_path / "boxes") == set()
        assert list((tmp_path / "boxes").iterdir()) == []

    asyncio.run(main())


def test_one_key_in_use_fills_the_pool(make_config: Any, tmp_path: Path) -> None:
    async def main() -> None:
        runner = make_runner(make_config(), warm=3)
        try:
            await ask(runner, poolable("one"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 3)
            assert len(waiting_pids(tmp_path / "boxes")) == 3
            # Two at once: both are served by waiting processes.
            answers = await asyncio.gather(ask(runner, poolable("2")), ask(runner, poolable("3")))
            assert {a["stdin"] for a in answers} == {"2", "3"}
            assert runner.warm is not None and runner.warm.hits == 2
            await until(lambda: runner.warm is not None and runner.warm.waiting == 3)
        finally:
            await runner.aclose()

    asyncio.run(main())


def test_an_invocation_that_cannot_wait_never_uses_the_pool(make_config: Any) -> None:
    async def main() -> None:
        runner = make_runner(make_config(), warm=1)
        try:
            plain = CliInvocation(args=("--key", "a"), stdin=b"x")
            await ask(runner, plain)
            await asyncio.sleep(0.3)
            assert runner.warm is not None
            assert (runner.warm.waiting, runner.warm.starting, runner.warm.misses) == (0, 0, 0)
            assert runner.warm.cold_start_ms_p50 is None  # not a request the pool could serve
        finally:
            await runner.aclose()

    asyncio.run(main())


def test_the_first_byte_deadline_counts_from_the_prompt(make_config: Any) -> None:
    config = make_config(timeouts={"first_byte_ms": 800, "idle_ms": 800, "total_ms": 20000})

    async def main() -> None:
        runner = make_runner(config, warm=1)
        try:
            await ask(runner, poolable("one"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            await asyncio.sleep(1.2)  # longer than first_byte_ms, waiting
            answer = await ask(runner, poolable("two"))
            assert answer["stdin"] == "two" and answer["waited_s"] > 1.0
        finally:
            await runner.aclose()

    asyncio.run(main())


def test_waiting_processes_do_not_count_against_max_concurrent(make_config: Any) -> None:
    async def main() -> None:
        runner = make_runner(make_config(max_concurrent=1), warm=2)
        try:
            await ask(runner, poolable("one"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 2)
            assert runner.active == 0
            answer = await ask(runner, poolable("three"))  # a slot, though two wait
            assert answer["stdin"] == "three"
        finally:
            await runner.aclose()

    asyncio.run(main())


def test_a_full_pool_makes_room_for_a_key_asked_for_again(make_config: Any, tmp_path: Path) -> None:
    async def main() -> None:
        runner = make_runner(make_config(), warm=1)
        try:
            await ask(runner, poolable("one", key="a"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            [a] = waiting_pids(tmp_path / "boxes")
            await ask(runner, poolable("once", key="b"))  # a one-off key pushes nothing out
            await asyncio.sleep(0.3)
            assert waiting_pids(tmp_path / "boxes") == {a}
            await ask(runner, poolable("two", key="b"))  # asked again: b's replaces a's
            await until(lambda: not alive(a))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            [b] = waiting_pids(tmp_path / "boxes")
            assert (await ask(runner, poolable("three", key="b")))["pid"] == b
            assert runner.warm is not None and runner.warm.hits == 1
        finally:
            await runner.aclose()

    asyncio.run(main())


def test_two_kinds_of_requests_taking_turns_leave_the_waiting_one_in_place(
    make_config: Any, tmp_path: Path
) -> None:
    async def main() -> None:
        runner = make_runner(make_config(), warm=1)
        boxes = tmp_path / "boxes"
        try:
            await ask(runner, poolable("a1", key="a"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            for turn in range(3):
                [a] = waiting_pids(boxes)
                await ask(runner, poolable(f"b{turn}", key="b"))  # a miss: a's stays
                await asyncio.sleep(0.2)
                assert waiting_pids(boxes) == {a}
                assert (await ask(runner, poolable(f"a{turn}", key="a")))["pid"] == a
                await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            assert runner.warm is not None
            assert (runner.warm.hits, runner.warm.misses) == (3, 4)
            # b asked more often than a lately: b's process replaces a's.
            [a] = waiting_pids(boxes)
            await ask(runner, poolable("b3", key="b"))
            await ask(runner, poolable("b4", key="b"))
            await until(lambda: not alive(a))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            [b] = waiting_pids(boxes)
            assert (await ask(runner, poolable("b5", key="b")))["pid"] == b
        finally:
            await runner.aclose()
        assert waiting_pids(boxes) == set()

    asyncio.run(main())


def test_two_kinds_of_requests_share_a_pool_of_two(make_config: Any, tmp_path: Path) -> None:
    async def main() -> None:
        runner = make_runner(make_config(), warm=2)
        try:
            await ask(runner, poolable("a1", key="a"))  # a fills the pool
            await until(lambda: runner.warm is not None and runner.warm.waiting == 2)
            await ask(runner, poolable("b1", key="b"))  # once: pushes nothing out
            await ask(runner, poolable("a2", key="a"))
            await ask(runner, poolable("b2", key="b"))  # again: one of a's two makes room
            await until(lambda: runner.warm is not None and runner.warm.waiting == 2)
            hits = runner.warm.hits if runner.warm else 0
            await ask(runner, poolable("a3", key="a"))
            await ask(runner, poolable("b3", key="b"))
            assert runner.warm is not None and runner.warm.hits == hits + 2
        finally:
            await runner.aclose()

    asyncio.run(main())


def test_changed_credentials_retire_a_waiting_process(
    make_config: Any, owner_home: Path, tmp_path: Path
) -> None:
    async def main() -> None:
        runner = make_runner(make_config(), warm=1)
        try:
            await ask(runner, poolable("one"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            [stale] = waiting_pids(tmp_path / "boxes")
            credentials = owner_home / ".claude" / ".credentials.json"
            later = credentials.stat().st_mtime + 5
            os.utime(credentials, (later, later))  # the CLI refreshed the owner's token
            answer = await ask(runner, poolable("two"))
            assert answer["pid"] != stale and answer["stdin"] == "two"
            await until(lambda: not alive(stale))
            assert runner.warm is not None and runner.warm.misses == 2
        finally:
            await runner.aclose()

    asyncio.run(main())


def test_an_idle_process_is_recycled(make_config: Any, tmp_path: Path) -> None:
    async def main() -> None:
        runner = make_runner(make_config(), warm=1, warm_max_idle_s=0.5)
        try:
            await ask(runner, poolable("one"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            [old] = waiting_pids(tmp_path / "boxes")
            await until(lambda: not alive(old))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            assert waiting_pids(tmp_path / "boxes") - {old}
        finally:
            await runner.aclose()

    asyncio.run(main())


def test_a_process_that_dies_waiting_is_dropped_not_restarted(
    make_config: Any, tmp_path: Path
) -> None:
    async def main() -> None:
        runner = make_runner(make_config(), warm=1)
        try:
            await ask(runner, poolable("one"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1)
            [pid] = waiting_pids(tmp_path / "boxes")
            os.kill(pid, signal.SIGKILL)
            await until(lambda: runner.warm is not None and runner.warm.waiting == 0)
            await asyncio.sleep(0.3)
            assert runner.warm is not None and runner.warm.starting == 0
            assert list((tmp_path / "boxes").iterdir()) == []  # its sandbox went too
            assert (await ask(runner, poolable("two")))["stdin"] == "two"  # cold
        finally:
            await runner.aclose()

    asyncio.run(main())


def test_retire_stops_the_waiting_but_not_the_serving(make_config: Any, tmp_path: Path) -> None:
    slow = ECHO.replace("data = sys.stdin", "time.sleep(0.5)\ndata = sys.stdin")

    async def main() -> None:
        runner = make_runner(make_config(slow), warm=2)
        try:
            await ask(runner, poolable("one"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 2)
            serving = asyncio.create_task(ask(runner, poolable("two")))
            await until(lambda: runner.active == 1)
            await runner.retire()
            assert runner.warm is not None and runner.warm.waiting == 0
            assert (await serving)["stdin"] == "two"  # the request on it finished
            await asyncio.sleep(0.3)
            assert runner.warm.waiting == runner.warm.starting == 0  # nothing new started
            assert waiting_pids(tmp_path / "boxes") == set()
        finally:
            await runner.aclose()

    asyncio.run(main())


def test_a_spawn_on_a_closed_runner_fails_and_starts_nothing(make_config: Any) -> None:
    async def main() -> None:
        runner = make_runner(make_config(), warm=1)
        await runner.aclose()
        with pytest.raises(ProviderError) as info:
            await ask(runner, poolable("x"))
        assert info.value.failure is Failure.SPAWN_FAILED
        assert runner.warm is not None and runner.warm.starting == 0

    asyncio.run(main())


# A CLI that never reads its stdin nor exits on its own, under a runner in a process of its
# own that is then killed with SIGKILL: no cleanup of OLP's can run, the kernel's
# parent-death signal must take the child along.
_KILLED_PARENT = """
import asyncio, sys
from olp.config import load_config
from olp.providers._subprocess import CliInvocation, CliRunner

async def main():
    runner = CliRunner("cli", load_config().providers["cli"], default_command="x")
    async with runner.spawn(CliInvocation(args=())) as proc:
        print(proc.pid, flush=True)
        await asyncio.sleep(60)

if sys.argv[1] == "uvloop":
    import uvloop
    uvloop.install()
asyncio.run(main())
"""


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_child_dies_with_olp_even_by_sigkill(make_config: Any, loop: str) -> None:
    make_config("#!/bin/sh\nexec sleep 60\n")
    parent = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PARENT, loop], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert alive(child)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(child)
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


# A CLI that takes client tools over MCP as Claude Code does, with the official `mcp`
# client: it connects to the endpoint its MCP config names as soon as it starts, lists the
# tools, lists them again when told they changed (unless IGNORE_CHANGES is set), and once
# it has its prompt (and any list asked for meanwhile) says each list it got and the
# prompt. (The runner writes the prompt once the bridge has answered the new list; the
# client may read that answer a moment later.)
MCP_CHILD = """#!/usr/bin/env python3
import asyncio, json, os, sys
import mcp.types as types
from mcp import Client

async def main():
    url = open(os.path.join(os.environ["HOME"], "mcp-url")).read()
    listed, clients, tasks = [], [], set()

    async def relist():
        listed.append([tool.name for tool in (await clients[0].list_tools()).tools])

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification) and not IGNORE_CHANGES:
            tasks.add(asyncio.create_task(relist()))

    async with Client(url, mode="legacy", message_handler=on_message) as client:
        clients.append(client)
        await relist()
        prompt = await asyncio.to_thread(sys.stdin.buffer.read)
        await asyncio.gather(*tasks)
        print(json.dumps({"pid": os.getpid(), "listed": listed, "stdin": prompt.decode()}),
              flush=True)

asyncio.run(main())
"""


def mcp_url_file(url: str) -> dict[str, bytes]:
    return {"mcp-url": url.encode()}


def with_tools(prompt: str, *names: str) -> CliInvocation:
    return CliInvocation(
        args=("--tools",),
        stdin=prompt.encode(),
        waits_for_prompt=True,
        mcp_files=mcp_url_file,
        tools_run=BridgedRun([Tool(name) for name in names]),
    )


def bridged_runner(config: ProviderConfig) -> tuple[CliRunner, ToolBridge]:
    bridge = ToolBridge("cli")

    async def get_bridge() -> ToolBridge:
        return bridge

    return make_runner(config, warm=1, bridge=get_bridge), bridge


def test_a_process_started_ahead_takes_the_tools_of_the_request_it_serves(
    make_config: Any, tmp_path: Path
) -> None:
    async def main() -> None:
        runner, bridge = bridged_runner(make_config(MCP_CHILD.replace("IGNORE_CHANGES", "0")))
        try:
            cold = await ask(runner, with_tools("one", "get_weather"))
            assert cold["listed"] == [["get_weather"]]  # bound before it started
            # The one started ahead connects and lists no tools before it is counted waiting.
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1, 30)
            warm = await ask(runner, with_tools("two", "get_time", "get_date"))
            # Told of the request's tools, it listed them again before its prompt came.
            assert warm["listed"] == [[], ["get_time", "get_date"]]
            assert warm["stdin"] == "two"
            assert runner.warm is not None
            assert (runner.warm.hits, runner.warm.misses) == (1, 1)
        finally:
            await runner.aclose()
            await bridge.aclose()
        assert waiting_pids(tmp_path / "boxes") == set()

    asyncio.run(main())


def test_a_process_started_ahead_that_does_not_take_the_tools_gives_way_to_a_cold_one(
    make_config: Any, tmp_path: Path
) -> None:
    async def main() -> None:
        runner, bridge = bridged_runner(make_config(MCP_CHILD.replace("IGNORE_CHANGES", "1")))
        try:
            await ask(runner, with_tools("one", "get_weather"))
            await until(lambda: runner.warm is not None and runner.warm.waiting == 1, 30)
            [ahead] = waiting_pids(tmp_path / "boxes")
            answer = await ask(runner, with_tools("two", "get_time"))
            assert answer["pid"] != ahead  # stopped, once it did not list them again
            assert answer["listed"] == [["get_time"]]
            assert not alive(ahead)
            assert runner.warm is not None
            assert (runner.warm.hits, runner.warm.misses) == (0, 2)
        finally:
            await runner.aclose()
            await bridge.aclose()
        assert waiting_pids(tmp_path / "boxes") == set()

    asyncio.run(main())
