"""The shared CLI runner against real tiny executables (Python scripts in a tmp dir).

Each test writes one script, points a provider config at it (through `load_config`, so
the environment scrubbing is the real one) and drives `CliRunner` in its own loop.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from olp.config import load_config
from olp.config.model import CHILD_ENV_ALLOWLIST, ProviderConfig
from olp.errors import Failure, ProviderError
from olp.providers._subprocess import CliInvocation, CliProcess, CliRunner

PY_BIN = str(Path(sys.executable).parent)

PRELUDE = """#!/usr/bin/env python3
import json, os, sys, time, signal, subprocess
"""

RECORDER = (
    PRELUDE
    + """
data = sys.stdin.buffer.read()
home = os.environ["HOME"]
listing = sorted(
    os.path.relpath(os.path.join(d, f), home) for d, _, fs in os.walk(home) for f in fs
)
links = {}
for rel in listing:
    full = os.path.join(home, rel)
    if os.path.islink(full):
        links[rel] = [os.readlink(full), open(full).read()]
record = {
    "argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
    "cwd_listing": os.listdir("."), "stdin": data.decode(), "home_files": listing,
    "links": links, "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
    "settings": open(os.path.join(home, ".cfg/settings.json")).read(),
}
print(json.dumps(record), flush=True)
print("second line", flush=True)
"""
)


def proc_gone(pid: int) -> bool:
    """Gone, or a zombie waiting for a reaper that is not us (not running any more)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc_gone(pid):
            return True
        time.sleep(0.02)
    return proc_gone(pid)


@pytest.fixture
def owner_home(tmp_path: Path) -> Path:
    home = tmp_path / "owner-home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"token": "owner-secret"}')
    return home


@pytest.fixture
def make_config(tmp_path: Path, owner_home: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Secrets of OLP's own that must never reach a child.
    monkeypatch.setenv("OLP_OWNER_TOKEN", "olp-owner-secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    monkeypatch.setenv("SOME_UNRELATED", "x")
    monkeypatch.setenv("HOME", str(owner_home))
    monkeypatch.setenv("OLP_HOME", str(tmp_path / "olp"))
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))

    def make(script: str, **provider: Any) -> ProviderConfig:
        path = tmp_path / f"cli-{len(list(tmp_path.glob('cli-*')))}"
        path.write_text(script)
        path.chmod(0o755)
        env = {"PATH": f"{PY_BIN}:{os.environ['PATH']}", **provider.pop("env", {})}
        timeouts = {"first_byte_ms": 5000, "idle_ms": 5000, "total_ms": 20000}
        timeouts.update(provider.pop("timeouts", {}))
        conf = {"type": "claude-cli", "command": str(path), "env": env, "timeouts": timeouts}
        conf.update(provider)
        (tmp_path / "olp").mkdir(exist_ok=True)
        (tmp_path / "olp" / "config.json").write_bytes(orjson.dumps({"providers": {"cli": conf}}))
        return load_config().providers["cli"]

    return make


async def until(predicate: Callable[[], bool]) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def runner(config: ProviderConfig, **kw: Any) -> CliRunner:
    return CliRunner("cli", config, default_command="fake-cli", **kw)


async def collect(proc: CliProcess) -> list[bytes]:
    return [line async for line in proc.lines()]


def test_work_files_are_the_only_files_of_the_working_directory(make_config: Any) -> None:
    run = runner(make_config(RECORDER))
    invocation = CliInvocation(
        args=(), home_files={".cfg/settings.json": b"{}"}, work_files={".env": b""}
    )

    async def go() -> list[bytes]:
        async with run.spawn(invocation) as proc:
            return await collect(proc)

    rec = orjson.loads(asyncio.run(go())[0])
    assert rec["cwd_listing"] == [".env"]
    assert ".env" not in rec["home_files"]


def test_isolation_env_argv_stdin_cwd_home(
    make_config: Any, owner_home: Path, tmp_path: Path
) -> None:
    config = make_config(RECORDER, env={"OWNER_EXTRA": "from-config"})
    run = runner(config)
    invocation = CliInvocation(
        args=("-p", "two words", ""),
        stdin=b"the prompt \xe2\x9c\x93",
        env={"CLI_VAR": "1"},
        home_files={".cfg/settings.json": b'{"a": 1}'},
        credentials=(
            (".claude/.credentials.json", ".claude/.credentials.json"),
            (".missing/file", ".missing/file"),
        ),
    )

    async def go() -> tuple[list[bytes], int, Path]:
        async with run.spawn(invocation) as proc:
            assert run.active == 1
            lines = await collect(proc)
            return lines, await proc.wait(), proc.home

    lines, status, home = asyncio.run(go())
    assert status == 0
    assert lines[1] == b"second line"
    rec = orjson.loads(lines[0])
    assert rec["argv"] == ["-p", "two words", ""]
    assert rec["stdin"] == "the prompt ✓"
    env = rec["env"]
    assert "OLP_OWNER_TOKEN" not in env
    assert "OPENAI_API_KEY" not in env
    assert "SOME_UNRELATED" not in env
    assert not any("secret" in v for v in env.values())
    assert env["TZ"] == "UTC"
    assert env["CLI_VAR"] == "1"
    assert env["OWNER_EXTRA"] == "from-config"
    assert env["HOME"] == str(home)
    assert env["HOME"] != str(owner_home)
    assert env["TMPDIR"].startswith(str(home.parent))
    allowed = {*CHILD_ENV_ALLOWLIST, "HOME", "TZ", "TMPDIR", "CLI_VAR", "OWNER_EXTRA"}
    assert set(env) - allowed <= {"PWD", "SHLVL", "_"}  # set by /usr/bin/env itself
    assert rec["cwd_listing"] == []
    assert rec["cwd"] != str(home)
    assert Path(rec["cwd"]).parent == home.parent
    assert rec["settings"] == '{"a": 1}'
    assert ".missing/file" not in rec["home_files"]
    link = rec["links"][".claude/.credentials.json"]
    assert link == [str(owner_home / ".claude/.credentials.json"), '{"token": "owner-secret"}']
    # Its own session and process group: signals to the group never reach OLP.
    assert rec["pgid"] == rec["pid"] == rec["sid"]
    assert os.getpgid(0) != rec["pgid"]
    # Everything private is gone; the owner's credential file is not.
    assert not home.parent.exists()
    assert (owner_home / ".claude/.credentials.json").read_text() == '{"token": "owner-secret"}'
    assert list((tmp_path / "tmp").iterdir()) == []
    assert run.active == 0


def test_missing_binary_is_cli_not_found(make_config: Any) -> None:
    config = make_config("#!/bin/sh\n")
    run = CliRunner(
        "claude",
        ProviderConfig("claude", "claude-cli", command=None, inherited_env=config.inherited_env),
        default_command="claude-definitely-not-installed",
        install_hint="npm i -g @anthropic-ai/claude-code",
    )
    assert run.resolve_command() is None

    async def go() -> None:
        async with run.spawn(CliInvocation(args=())):
            pass

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert info.value.failure is Failure.CLI_NOT_FOUND
    assert info.value.message == (
        "claude-definitely-not-installed not found on PATH; install it with "
        "`npm i -g @anthropic-ai/claude-code` or set providers.claude.command"
    )


def test_resolve_command_on_path(make_config: Any, tmp_path: Path) -> None:
    config = make_config("#!/bin/sh\necho hi\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mycli").symlink_to(config.command)
    named = ProviderConfig(
        "cli", "claude-cli", command="mycli", env={"PATH": f"{bin_dir}:/usr/bin"}
    )
    assert runner(named).resolve_command() == str(bin_dir / "mycli")


def run_to_error(
    config: ProviderConfig,
    answers: Callable[[bytes], bool] = lambda line: True,
    invocation: CliInvocation | None = None,
    **kw: Any,
) -> tuple[ProviderError, list[bytes], int]:
    """Run until the runner raises; return the error, the lines before it and the pid.

    `answers(line)`: whether a line carries part of the answer (what a translation
    counts for `answered`); the others are the CLI's chatter.
    """
    run = runner(config, **kw)
    lines: list[bytes] = []
    pid = 0

    async def go() -> None:
        nonlocal pid
        async with run.spawn(invocation or CliInvocation(args=())) as proc:
            pid = proc.pid
            answer_lines = 0
            async for line in proc.lines():
                lines.append(line)
                answer_lines += answers(line)
                proc.answered(answer_lines)
            await proc.wait()

    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert pid and wait_gone(pid, 1.0), "child left behind"
    return info.value, lines, pid


@pytest.mark.parametrize(
    ("script", "timeouts", "kind"),
    [
        ("time.sleep(30)", {"first_byte_ms": 300}, "first-byte"),
        ("print('one', flush=True); time.sleep(30)", {"idle_ms": 300}, "idle"),
        (
            "while True:\n    print('tick', flush=True); time.sleep(0.05)",
            {"idle_ms": 1000, "total_ms": 600},
            "total",
        ),
        ("os.close(1); time.sleep(30)", {"idle_ms": 300}, "idle"),
    ],
    ids=["first-byte", "idle", "total", "eof-but-no-exit"],
)
def test_timeouts(make_config: Any, script: str, timeouts: dict[str, int], kind: str) -> None:
    started = time.monotonic()
    err, lines, _ = run_to_error(make_config(PRELUDE + script, timeouts=timeouts))
    assert err.failure is Failure.TIMEOUT
    assert f"({kind} timeout)" in err.message
    assert time.monotonic() - started < 5
    if kind == "total":
        assert len(lines) > 3


_STATUS_LOOP = "while True:\n    print('status', flush=True); time.sleep(0.05)"


@pytest.mark.parametrize(
    ("script", "kind"),
    [
        (_STATUS_LOOP, "first-byte"),
        ("print('answer', flush=True)\n" + _STATUS_LOOP, "idle"),
    ],
    ids=["chatter-before-the-answer", "chatter-after-part-of-the-answer"],
)
def test_chatter_is_not_progress(make_config: Any, script: str, kind: str) -> None:
    """Lines that carry no answer (a CLI's status lines and heartbeats) neither end the
    first-byte wait nor restart the idle clock, however often they come."""
    timeouts = {"first_byte_ms": 800, "idle_ms": 800, "total_ms": 30_000}
    started = time.monotonic()
    err, lines, _ = run_to_error(
        make_config(PRELUDE + script, timeouts=timeouts), lambda line: line == b"answer"
    )
    took = time.monotonic() - started
    assert err.failure is Failure.TIMEOUT
    assert f"({kind} timeout)" in err.message
    assert lines.count(b"status") > 5  # the chatter did flow meanwhile
    assert took < 3


def test_a_cli_printing_whole_messages_has_only_the_total_deadline(make_config: Any) -> None:
    """Silence before a whole message is the model writing: only `total_ms` ends it."""
    timeouts = {"first_byte_ms": 200, "idle_ms": 200, "total_ms": 1500}
    started = time.monotonic()
    err, _, _ = run_to_error(
        make_config(PRELUDE + "time.sleep(30)", timeouts=timeouts),
        invocation=CliInvocation(args=(), prints_whole_messages=True),
    )
    assert err.failure is Failure.TIMEOUT
    assert "(total timeout)" in err.message
    assert 1.4 < time.monotonic() - started < 5


def test_fifty_megabyte_line_is_refused(make_config: Any) -> None:
    script = PRELUDE + "sys.stdout.write('x' * (50 * 1024 * 1024) + '\\n'); sys.stdout.flush()"
    err, lines, _ = run_to_error(make_config(script), max_line_bytes=1024 * 1024)
    assert err.failure is Failure.SPAWN_FAILED
    assert "printed a line over 1048576 bytes" in err.message
    assert lines == []


def test_long_line_within_limit_and_garbage_bytes(make_config: Any) -> None:
    script = PRELUDE + (
        "out = sys.stdout.buffer\n"
        "out.write(b'\\x00\\xff\\xfe not utf8 {\\n')\n"
        "out.write(b'y' * 3_000_000 + b'\\n')\n"
        "out.write(b'\\r\\n\\n' + bytes(range(256)).replace(b'\\n', b'') + b'\\n')\n"
        "out.write(b'no newline at the end')\n"
    )
    run = runner(make_config(script))

    async def go() -> tuple[list[bytes], int]:
        async with run.spawn(CliInvocation(args=())) as proc:
            return await collect(proc), await proc.wait()

    lines, status = asyncio.run(go())
    assert status == 0
    assert lines[0] == b"\x00\xff\xfe not utf8 {"
    assert lines[1] == b"y" * 3_000_000
    assert lines[2:4] == [b"\r", b""]
    assert len(lines[4]) == 255
    assert lines[5] == b"no newline at the end"


def test_chatty_stderr_does_not_block_and_keeps_a_tail(make_config: Any) -> None:
    script = PRELUDE + (
        "for i in range(20000):\n"
        "    sys.stderr.write(f'noise line {i:06d}\\n')\n"
        "sys.stderr.flush()\n"
        "print('done', flush=True)\n"
        "sys.exit(3)\n"
    )
    run = runner(make_config(script))

    async def go() -> tuple[list[bytes], int, str]:
        async with run.spawn(CliInvocation(args=())) as proc:
            lines = await collect(proc)
            return lines, await proc.wait(), proc.stderr_tail()

    lines, status, tail = asyncio.run(go())
    assert lines == [b"done"]
    assert status == 3
    assert tail.endswith("noise line 019999\n")
    assert len(tail) <= 8 * 1024


def test_child_ignoring_sigterm_is_killed(make_config: Any) -> None:
    script = PRELUDE + (
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print(os.getpid(), flush=True)\n"
        "time.sleep(60)\n"
    )
    run = runner(make_config(script), kill_grace_s=0.3)

    async def go() -> tuple[int, int | None, float]:
        async with run.spawn(CliInvocation(args=())) as proc:
            async for _ in proc.lines():
                break
            pid = proc.pid
            t0 = time.monotonic()
        return pid, proc.returncode, time.monotonic() - t0

    pid, status, took = asyncio.run(go())
    assert status == -signal.SIGKILL
    assert 0.25 <= took < 3
    assert proc_gone(pid)


def test_grandchild_is_killed_with_its_parent(make_config: Any) -> None:
    script = PRELUDE + (
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(os.getpid(), child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    run = runner(make_config(script))

    async def go() -> list[int]:
        async with run.spawn(CliInvocation(args=())) as proc:
            async for line in proc.lines():
                return [int(x) for x in line.split()]
        raise AssertionError("no pids")

    pids = asyncio.run(go())
    assert len(pids) == 2
    assert all(wait_gone(pid, 3.0) for pid in pids)


def test_wait_is_prompt_when_a_grandchild_keeps_the_pipes(make_config: Any) -> None:
    """The leader exits; a grandchild still holds stderr. wait() returns; exit kills it."""
    script = PRELUDE + (
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "sys.exit(7)\n"
    )
    run = runner(make_config(script))

    async def go() -> tuple[int, int, float]:
        async with run.spawn(CliInvocation(args=())) as proc:
            lines = [line async for line in proc.lines()]
            t0 = time.monotonic()
            status = await proc.wait()
            return int(lines[0]), status, time.monotonic() - t0

    grandchild, status, took = asyncio.run(go())
    assert status == 7
    assert took < 1.0
    assert wait_gone(grandchild, 3.0)


def test_cancellation_mid_stream_kills_and_cleans_up(make_config: Any) -> None:
    script = PRELUDE + (
        "while True:\n    print(os.getpid(), os.environ['HOME'], flush=True); time.sleep(0.02)"
    )
    run = runner(make_config(script))
    seen: list[bytes] = []

    async def consume() -> None:
        async with run.spawn(CliInvocation(args=())) as proc:
            async for line in proc.lines():
                seen.append(line)

    async def go() -> None:
        task = asyncio.create_task(consume())
        await until(lambda: len(seen) >= 3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert run.active == 0

    asyncio.run(go())
    pid, home = seen[0].decode().split(" ", 1)
    assert wait_gone(int(pid), 1.0)
    assert not Path(home).exists()


def test_concurrency_limit_and_queue(make_config: Any) -> None:
    script = PRELUDE + "print('go', flush=True); sys.stdin.read(); time.sleep(0.3)"
    config = make_config(script, max_concurrent=1, timeouts={"first_byte_ms": 3000})
    run = runner(config, queue_size=1)
    order: list[str] = []

    async def one(tag: str) -> None:
        async with run.spawn(CliInvocation(args=())) as proc:
            order.append(f"start {tag}")
            await collect(proc)
            await proc.wait()
        order.append(f"end {tag}")

    async def go() -> ProviderError:
        first = asyncio.create_task(one("a"))
        await until(lambda: run.active >= 1)
        second = asyncio.create_task(one("b"))
        await asyncio.sleep(0.05)  # b is now queued
        with pytest.raises(ProviderError) as info:
            await one("c")
        await asyncio.gather(first, second)
        return info.value

    err = asyncio.run(go())
    assert err.failure is Failure.CONCURRENCY_LIMIT
    assert "max_concurrent=1" in err.message
    assert order == ["start a", "end a", "start b", "end b"]
    assert run.active == 0


def test_queue_wait_is_bounded(make_config: Any) -> None:
    """A queued request waits at most the first-byte timeout for a slot."""
    script = PRELUDE + "time.sleep(2)"
    run = runner(make_config(script, max_concurrent=1, timeouts={"first_byte_ms": 200}))

    async def hold() -> None:
        async with run.spawn(CliInvocation(args=())) as proc:
            await asyncio.sleep(0.6)
            assert proc.returncode is None

    async def go() -> ProviderError:
        holder = asyncio.create_task(hold())
        await until(lambda: run.active >= 1)
        with pytest.raises(ProviderError) as info:
            async with run.spawn(CliInvocation(args=())):
                pass
        await holder
        return info.value

    err = asyncio.run(go())
    assert err.failure is Failure.CONCURRENCY_LIMIT
    assert "waited 0.2s for a free slot" in err.message
    assert run.max_concurrent == 1
    assert run.active == 0


def test_aclose_kills_live_children(make_config: Any) -> None:
    script = PRELUDE + "print(os.getpid(), flush=True); time.sleep(60)"
    run = runner(make_config(script, max_concurrent=3))
    pids: list[int] = []

    async def hold() -> None:
        async with run.spawn(CliInvocation(args=())) as proc:
            pids.append(proc.pid)
            await collect(proc)

    async def go() -> ProviderError:
        tasks = [asyncio.create_task(hold()) for _ in range(3)]
        await until(lambda: len(pids) >= 3)
        await run.aclose()
        assert all(proc_gone(pid) for pid in pids)
        await asyncio.gather(*tasks, return_exceptions=True)
        with pytest.raises(ProviderError) as info:
            async with run.spawn(CliInvocation(args=())):
                pass
        return info.value

    err = asyncio.run(go())
    assert err.failure is Failure.SPAWN_FAILED
    assert run.active == 0


def test_large_stdin_is_fed_while_stdout_flows(make_config: Any) -> None:
    """A prompt bigger than the pipe buffer must not deadlock against a chatty child."""
    script = PRELUDE + (
        "for i in range(2000):\n    print('x' * 100)\n"
        "sys.stdout.flush()\n"
        "print(len(sys.stdin.buffer.read()), flush=True)\n"
    )
    run = runner(make_config(script))

    async def go() -> list[bytes]:
        async with run.spawn(CliInvocation(args=(), stdin=b"p" * 5_000_000)) as proc:
            lines = await collect(proc)
            await proc.wait()
            return lines

    lines = asyncio.run(go())
    assert lines[-1] == b"5000000"
    assert len(lines) == 2001


@pytest.mark.parametrize("turns", range(8))
def test_a_cancel_that_lands_as_output_arrives_is_never_lost(make_config: Any, turns: int) -> None:
    """The client leaves just as the CLI's next line lands: the read must still end.

    `asyncio.wait_for` (Python 3.11) returns the result instead of raising when the
    cancel arrives after the read it wraps completed (but before the reader resumed);
    the reader then went on waiting for a CLI that would never write again. The child's
    line is made to wait in the pipe (the loop is blocked meanwhile), and the cancel lands
    `turns` loop iterations later: every phase of the read's wake-up is covered.
    """
    script = PRELUDE + (
        "print('first', flush=True)\n"
        "sys.stdin.readline()\n"
        "print('second', flush=True)\n"
        "time.sleep(60)\n"
    )
    run = runner(make_config(script), kill_grace_s=0.3)
    invocation = CliInvocation(args=(), stdin=b"", keep_stdin_open=True)
    seen: list[bytes] = []
    procs: list[CliProcess] = []

    async def consume() -> None:
        async with run.spawn(invocation) as proc:
            procs.append(proc)
            async for line in proc.lines():
                seen.append(line)

    async def go() -> str:
        task = asyncio.create_task(consume())
        await until(lambda: seen == [b"first"])
        assert await procs[0].send(b"go\n")
        # Block the loop on purpose: "second" is in the pipe before it next polls.
        time.sleep(0.3)  # noqa: ASYNC251
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=3)
        if not done:
            task.cancel()  # a second cancel, so that the child is cleaned up all the same
            await asyncio.wait({task})
            return "still reading after the cancel"
        return "cancelled" if task.cancelled() else f"ended: {task.exception()!r}"

    assert asyncio.run(go()) == "cancelled"
    assert wait_gone(procs[0].pid, 3.0)


def test_a_classified_stderr_line_ends_the_run_at_once(make_config: Any) -> None:
    """A CLI that only says on stderr that it is retrying: the first line the check
    classifies ends the read (long before any deadline) and the child is killed."""
    script = (
        PRELUDE
        + 'print(\'{"type": "init"}\', flush=True)\n'
        + "sys.stderr.write('noise\\n'); sys.stderr.flush(); time.sleep(0.3)\n"
        + "sys.stderr.write('retrying after 4'); sys.stderr.flush(); time.sleep(0.3)\n"
        + "sys.stderr.write('29\\n'); sys.stderr.flush(); time.sleep(30)\n"
    )
    config = make_config(script, timeouts={"first_byte_ms": 20_000, "idle_ms": 20_000})
    seen: list[bytes] = []

    def check(line: bytes) -> ProviderError | None:
        seen.append(line)
        if line.startswith(b"retrying after 429"):
            return ProviderError(Failure.RATE_LIMITED, "429", provider="cli")
        return None

    run = runner(config)
    pid = 0

    async def go() -> None:
        nonlocal pid
        async with run.spawn(CliInvocation(args=())) as proc:
            pid = proc.pid
            proc.watch_stderr(check)
            await collect(proc)

    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        asyncio.run(go())
    assert info.value.failure is Failure.RATE_LIMITED
    assert time.monotonic() - started < 5
    assert seen == [b"noise", b"retrying after 429"]  # whole lines, split writes joined
    assert wait_gone(pid, 1.0)


def test_home_links_are_made_in_the_private_home(make_config: Any) -> None:
    script = PRELUDE + "print(os.readlink(os.path.join(os.environ['HOME'], 'a/log.txt')))\n"
    run = runner(make_config(script))

    async def go() -> list[bytes]:
        invocation = CliInvocation(args=(), home_links={"a/log.txt": "/dev/stderr"})
        async with run.spawn(invocation) as proc:
            return await proc.output()

    assert asyncio.run(go()) == [b"/dev/stderr"]
