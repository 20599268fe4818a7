"""One running CLI child (see `olp.providers._subprocess` for the runner that makes it).

Reads stdout incrementally under OLP's own first-byte / idle / total deadlines with
bounded lines, drains stderr into a small tail (handing its lines to a check, when one is
set with `watch_stderr()`), and on `terminate()` ends the child's whole process group:
SIGTERM, then SIGKILL after the runner's grace, then reaps it.

The deadlines follow the answer, not the bytes: a CLI prints its own chatter (an init
line, "requesting" status lines, heartbeats) before and while its upstream works, so
only `answered(n)` — called by whoever translates the lines, with the count of lines that
were part of the answer or a classified error — ends the first-byte wait and restarts the
idle clock, each time that count grows.

A process may be started ahead of its request (the warm pool, `_warm_pool`): it is made
with `stdin=None` and waits until `begin(prompt)`, from which its deadlines count.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import suppress
from pathlib import Path
from typing import Protocol

from olp.config.model import ProviderConfig
from olp.errors import Failure, ProviderError
from olp.observability import event_logger

__all__ = ["STDERR_TAIL_BYTES", "CliProcess", "ProcessOwner", "StderrCheck"]

log = event_logger("olp.providers.cli")

STDERR_TAIL_BYTES = 8 * 1024
_CHUNK = 64 * 1024
# How often `wait()` re-checks the exit status when a grandchild still holds the pipes
# open (asyncio only reports the exit once every pipe has closed).
_EXIT_POLL_S = 0.05
# The same for a process waiting for its prompt, which may wait for minutes.
_WAITING_POLL_S = 1.0


# A classifier for one stderr line: the error it means, or None.
StderrCheck = Callable[[bytes], ProviderError | None]


class ProcessOwner(Protocol):
    """What a process needs of the runner that started it (a `CliRunner`)."""

    provider: str
    command: str
    config: ProviderConfig
    max_line_bytes: int
    kill_grace_s: float


class CliProcess:
    """One running child. Read `lines()` to EOF, then `wait()` for its exit status."""

    def __init__(
        self,
        runner: ProcessOwner,
        proc: asyncio.subprocess.Process,
        home: Path,
        stdin: bytes | None,
        started: float,
        *,
        keep_stdin_open: bool = False,
        whole_messages: bool = False,
        work: Path | None = None,
    ) -> None:
        self.home = home
        # The child's private working directory (where relative output paths land).
        self.work = work if work is not None else home
        self.pid = proc.pid
        self._runner = runner
        self._name = Path(runner.command).name
        self._proc = proc
        timeouts = runner.config.timeouts
        self._total_s = timeouts.total_ms / 1000
        if whole_messages:
            self._first_byte_s = self._idle_s = self._total_s
        else:
            self._first_byte_s = timeouts.first_byte_ms / 1000
            self._idle_s = timeouts.idle_ms / 1000
        self._started = started
        self._answer_lines = 0
        self._answered_at: float | None = None
        self._stderr = bytearray()
        self._stderr_check: StderrCheck | None = None
        self._stderr_failure: ProviderError | None = None
        self._terminated = False
        self._keep_stdin_open = keep_stdin_open
        self.started_ahead = stdin is None
        # Called once with the seconds from the start (or the prompt) to the first content
        # delivered (`content_delivered`).
        self.on_first_content: Callable[[float], None] | None = None
        self._content_at: float | None = None
        self._drainer = asyncio.create_task(self._drain_stderr())
        self._feeder: asyncio.Task[None] | None = None
        if stdin is not None:
            self._feeder = asyncio.create_task(self._feed(stdin))

    def begin(self, stdin: bytes) -> None:
        """Write the prompt to a process started ahead; its deadlines count from now."""
        if self._feeder is not None:
            raise RuntimeError("this process already has its prompt")
        self._started = time.monotonic()
        self._feeder = asyncio.create_task(self._feed(stdin))

    @property
    def waiting(self) -> bool:
        """Started ahead and still waiting for its prompt (`begin`)."""
        return self._feeder is None

    # -- reading -----------------------------------------------------------------------

    async def lines(self) -> AsyncGenerator[bytes]:
        """Stdout lines as they come, without the newline; the last one may lack it."""
        limit = self._runner.max_line_bytes
        buf = bytearray()
        scan = 0  # bytes of `buf` already searched for a newline
        while True:
            chunk = await self._read()
            if not chunk:
                break
            buf += chunk
            start = 0
            while (nl := buf.find(b"\n", scan)) >= 0:
                if nl - start > limit:
                    raise self._too_long(limit)
                yield bytes(buf[start:nl])
                start = scan = nl + 1
            if start:
                del buf[:start]
            scan = len(buf)
            if len(buf) > limit:
                raise self._too_long(limit)
        if buf:
            yield bytes(buf)

    def answered(self, answer_lines: int) -> None:
        """How many lines of the answer (or a classified error) the translation has
        counted so far. When it grew, the first-byte wait is over and the idle clock
        starts again from now; other lines (the CLI's chatter) leave both as they are."""
        if answer_lines > self._answer_lines:
            self._answer_lines = answer_lines
            self._answered_at = time.monotonic()

    def content_delivered(self) -> None:
        """The first piece of the answer's content has gone to the client (called by
        whoever yields the events): timed, and the runner may now start what would have
        competed with it for the CPU (the warm pool's replacement). Once per process."""
        if self._content_at is None:
            self._content_at = time.monotonic()
            if self.on_first_content is not None:
                self.on_first_content(self._content_at - self._started)

    def watch_stderr(self, check: StderrCheck) -> None:
        """Give each stderr line to `check` as it comes; the first error it returns ends
        the read (`lines()` raises it), for a CLI whose retry notices reach only stderr."""
        self._stderr_check = check

    async def output(self) -> list[bytes]:
        """Every stdout line to EOF, for a command whose whole output is its answer
        (`--version`, `login status`): each line counts as progress."""
        lines: list[bytes] = []
        async for line in self.lines():
            lines.append(line)
            self.answered(len(lines))
        return lines

    async def wait(self) -> int:
        """Exit status once stdout is done (negative: killed by that signal)."""
        deadline = min(self._started + self._total_s, time.monotonic() + self._idle_s)
        status = await self._exit_status(deadline)
        if status is None:
            raise self._timeout("closed its output but did not exit", self._idle_s, "idle")
        # Let the stderr reader take what the child wrote last (bounded: a grandchild
        # may hold the pipe open).
        await asyncio.wait({self._drainer}, timeout=0.2)  # never drops a cancel
        return status

    def stderr_tail(self) -> str:
        return bytes(self._stderr[-STDERR_TAIL_BYTES:]).decode("utf-8", "replace")

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def _read(self) -> bytes:
        """The next stdout chunk; b"" at EOF (or once the child exited and went quiet)."""
        stdout = self._proc.stdout
        assert stdout is not None
        total_at = self._started + self._total_s
        if self._answered_at is not None:
            at, kind, seconds = self._answered_at + self._idle_s, "idle", self._idle_s
        else:
            at, kind, seconds = self._started + self._first_byte_s, "first-byte", self._first_byte_s
        if total_at <= at:
            at, kind, seconds = total_at, "total", self._total_s
        while True:
            if self._stderr_failure is not None:
                raise self._stderr_failure
            left = at - time.monotonic()
            if left <= 0:
                raise self._timeout(_SILENCE[kind], seconds, kind)
            try:
                # Not `asyncio.wait_for`: on Python 3.11 it returns the read's result and
                # drops a cancel (the client went away) that lands just as data arrives.
                # Cancelling a pending read loses nothing: data is only taken on return.
                async with asyncio.timeout(min(left, _EXIT_POLL_S * 5)):
                    chunk = await stdout.read(_CHUNK)
            except TimeoutError:
                # The child exited but a grandchild still holds stdout open: what the
                # child wrote has been read, so this is the end of its output.
                if self._proc.returncode is not None:
                    return b""
                continue
            return chunk

    def _timeout(self, what: str, seconds: float, kind: str) -> ProviderError:
        return ProviderError(
            Failure.TIMEOUT,
            f"{self._name} {what} in {seconds:g}s ({kind} timeout)",
            provider=self._runner.provider,
        )

    def _too_long(self, limit: int) -> ProviderError:
        return ProviderError(
            Failure.SPAWN_FAILED,
            f"{self._name} printed a line over {limit} bytes; output abandoned",
            provider=self._runner.provider,
        )

    async def _feed(self, data: bytes) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        # A child that exits without reading its stdin is not our error: its output says.
        with suppress(BrokenPipeError, ConnectionResetError):
            if data:
                stdin.write(data)
                await stdin.drain()
            if not self._keep_stdin_open:
                stdin.close()

    async def send(self, data: bytes) -> bool:
        """Write more to a child spawned with `keep_stdin_open`, after the first `stdin`.

        False if the child no longer reads its stdin (it exited or closed it): not an
        error of its own, the child's output and exit status say what happened.
        """
        stdin = self._proc.stdin
        assert stdin is not None
        assert self._feeder is not None, "send() before begin()"
        await asyncio.shield(self._feeder)
        if stdin.is_closing():
            return False
        try:
            stdin.write(data)
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    async def _drain_stderr(self) -> None:
        stderr = self._proc.stderr
        assert stderr is not None
        pending = bytearray()  # the line being written, for `_stderr_check`
        while chunk := await stderr.read(4096):
            self._stderr += chunk
            if len(self._stderr) > 2 * STDERR_TAIL_BYTES:
                del self._stderr[:-STDERR_TAIL_BYTES]
            if self._stderr_check is not None and self._stderr_failure is None:
                pending += chunk
                *complete, rest = pending.split(b"\n")
                pending = rest[-STDERR_TAIL_BYTES:]
                self._stderr_failure = _first_failure(self._stderr_check, complete)

    # -- ending ------------------------------------------------------------------------

    async def _exit_status(self, deadline: float) -> int | None:
        """The exit status, or None if the child is still running at `deadline`."""
        waiter = asyncio.ensure_future(self._proc.wait())
        try:
            while self._proc.returncode is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                await asyncio.wait({waiter}, timeout=min(left, _EXIT_POLL_S))
            return self._proc.returncode
        finally:
            if not waiter.done():
                waiter.cancel()

    async def exited_within(self, seconds: float) -> bool:
        """Whether the child exits within `seconds` (a waiting process: slow polling, as
        it may wait for minutes)."""
        deadline = time.monotonic() + seconds
        waiter = asyncio.ensure_future(self._proc.wait())
        try:
            while self._proc.returncode is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                await asyncio.wait({waiter}, timeout=min(left, _WAITING_POLL_S))
            return True
        finally:
            if not waiter.done():
                waiter.cancel()

    async def terminate(self) -> None:
        """SIGTERM the process group, SIGKILL it after the grace, reap. Idempotent."""
        if self._terminated:
            return
        self._terminated = True
        grace = self._runner.kill_grace_s
        try:
            if self._proc.returncode is None:
                _killpg(self.pid, signal.SIGTERM)
                await self._exit_status(time.monotonic() + grace)
            else:
                # The leader is gone, but a grandchild of its group may not be.
                _killpg(self.pid, signal.SIGTERM)
        finally:
            # Synchronous, so a second cancellation cannot skip it.
            _killpg(self.pid, signal.SIGKILL)
            for task in (self._feeder, self._drainer):
                if task is not None:
                    task.cancel()
        if await self._exit_status(time.monotonic() + grace) is None:
            log.warning("cli_unreaped", provider=self._runner.provider, pid=self.pid)
        _close_transport(self._proc)
        log.debug(
            "cli_ended", provider=self._runner.provider, pid=self.pid, status=self._proc.returncode
        )


_SILENCE = {
    "first-byte": "gave no answer",
    "idle": "gave nothing more of its answer",
    "total": "did not finish",
}


def _first_failure(check: StderrCheck, lines: list[bytearray]) -> ProviderError | None:
    for line in lines:
        if (error := check(bytes(line))) is not None:
            return error
    return None


def _killpg(pgid: int, sig: signal.Signals) -> None:
    # ESRCH: the group is gone already; EPERM: not ours any more. Both mean: nothing to do.
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _close_transport(proc: asyncio.subprocess.Process) -> None:
    """Close the pipes even if a process that left our group still holds them."""
    transport = getattr(proc, "_transport", None)
    close = getattr(transport, "close", None)
    if close is not None:
        close()
