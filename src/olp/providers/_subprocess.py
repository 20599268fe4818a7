"""The shared CLI runner: every subscription CLI is spawned through here (DESIGN §5–§6).

    runner = CliRunner("claude", config, default_command="claude",
                       install_hint="npm i -g @anthropic-ai/claude-code")
    async with runner.spawn(CliInvocation(args=(...), stdin=prompt)) as proc:
        async for line in proc.lines():
            ...
        status = await proc.wait()

What it guarantees, so providers stay pure translation:
- argv list (never a shell); the prompt goes on stdin; the child runs in a private empty
  working directory with a private HOME and TMPDIR (`_sandbox`), credentials linked in,
  and an environment built only from the config (no OLP secret reaches a child);
- OLP's own first-byte / idle / total deadlines → `Failure.TIMEOUT`; bounded line parsing
  (a line over `max_line_bytes` → `Failure.SPAWN_FAILED`); stderr drained concurrently
  into a small tail buffer so a chatty stderr never blocks the child;
- the child leads its own process group; leaving `spawn()` for any reason (end, error,
  cancellation, timeout, `aclose()` at shutdown) sends SIGTERM to the whole group, then
  SIGKILL after a short grace, and reaps it; the private directory is removed;
- at most `max_concurrent` children per provider, with a short bounded wait queue
  (`Failure.CONCURRENCY_LIMIT` when it is full).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from olp.config.model import ProviderConfig
from olp.errors import Failure, ProviderError
from olp.observability import event_logger
from olp.providers._cli_limits import Slots
from olp.providers._sandbox import Sandbox, child_env, resolve_binary

__all__ = [
    "DEFAULT_MAX_CONCURRENT",
    "KILL_GRACE_S",
    "CliInvocation",
    "CliProcess",
    "CliRunner",
]

log = event_logger("olp.providers.cli")

DEFAULT_MAX_CONCURRENT = 4
# SIGTERM first so a CLI can flush/close cleanly; SIGKILL for whatever is left after this.
KILL_GRACE_S = 2.0
STDERR_TAIL_BYTES = 8 * 1024
_CHUNK = 64 * 1024
# How often `wait()` re-checks the exit status when a grandchild still holds the pipes
# open (asyncio only reports the exit once every pipe has closed).
_EXIT_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class CliInvocation:
    args: tuple[str, ...]  # arguments after the executable
    stdin: bytes = b""  # the prompt (never in argv)
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the scrubbed base env
    # Files written under the private HOME (relative paths), e.g. ".gemini/settings.json".
    home_files: Mapping[str, bytes] = field(default_factory=dict)
    # (path relative to the owner's real home, path relative to the private HOME):
    # symlinked in if the owner's file exists.
    credentials: tuple[tuple[str, str], ...] = ()
    # Leave stdin open after `stdin` was written, for a CLI that is spoken to over stdio
    # (codex app-server's JSON-RPC): write more with `CliProcess.send()`. Closed when the
    # child is terminated.
    keep_stdin_open: bool = False


class CliRunner:
    """Spawns one provider's CLI; see the module docstring."""

    def __init__(
        self,
        provider: str,
        config: ProviderConfig,
        *,
        default_command: str,
        max_line_bytes: int = 4 * 1024 * 1024,
        queue_size: int = 8,
        install_hint: str | None = None,
        kill_grace_s: float = KILL_GRACE_S,
    ) -> None:
        self.provider = provider
        self.config = config
        self.command = config.command or default_command
        self.max_line_bytes = max_line_bytes
        self.install_hint = install_hint
        self.kill_grace_s = kill_grace_s
        self._slots = Slots(config.max_concurrent or DEFAULT_MAX_CONCURRENT, queue_size)
        self._live: set[CliProcess] = set()
        self._closed = False

    @property
    def active(self) -> int:
        """Children running now (or being set up / torn down)."""
        return self._slots.active

    @property
    def max_concurrent(self) -> int:
        return self._slots.limit

    def child_path(self) -> str | None:
        """The PATH a child gets (the owner's `env.PATH` wins over OLP's own)."""
        return self.config.env.get("PATH") or self.config.inherited_env.get("PATH")

    def resolve_command(self) -> str | None:
        """Absolute path of the binary, or None if it cannot be found."""
        return resolve_binary(self.command, self.child_path())

    def not_found(self) -> ProviderError:
        where = "" if os.sep in self.command else " on PATH"
        fix = f"install it with `{self.install_hint}` or " if self.install_hint else ""
        return ProviderError(
            Failure.CLI_NOT_FOUND,
            f"{self.command} not found{where}; {fix}set providers.{self.provider}.command",
            provider=self.provider,
        )

    def spawn(self, invocation: CliInvocation) -> AbstractAsyncContextManager[CliProcess]:
        return self._spawn(invocation)

    async def aclose(self) -> None:
        """Kill every live child (OLP is shutting down); later spawns fail."""
        self._closed = True
        live = list(self._live)
        await asyncio.gather(*(p.terminate() for p in live), return_exceptions=True)

    @asynccontextmanager
    async def _spawn(self, invocation: CliInvocation) -> AsyncIterator[CliProcess]:
        if self._closed:
            raise ProviderError(
                Failure.SPAWN_FAILED,
                f"{self.provider}: OLP is shutting down",
                provider=self.provider,
            )
        command = self.resolve_command()
        if command is None:
            raise self.not_found()
        wait_s = self.config.timeouts.first_byte_ms / 1000
        await self._slots.acquire(wait_s, self._full)
        try:
            box = Sandbox.create(self.provider, self.config.inherited_env.get("TMPDIR"))
            try:
                env = self._prepare(box, invocation)
                process = await self._exec(command, invocation, box, env)
                self._live.add(process)
                try:
                    yield process
                finally:
                    self._live.discard(process)
                    await process.terminate()
            finally:
                box.remove()
        finally:
            self._slots.release()

    def _full(self, waited_s: float | None) -> ProviderError:
        why = (
            f"waited {waited_s:g}s for a free slot"
            if waited_s is not None
            else f"{self._slots.waiting} request(s) already waiting"
        )
        return ProviderError(
            Failure.CONCURRENCY_LIMIT,
            f"{self.provider} is at max_concurrent={self._slots.limit} and {why}",
            provider=self.provider,
        )

    def _prepare(self, box: Sandbox, invocation: CliInvocation) -> dict[str, str]:
        try:
            box.write_home_files(invocation.home_files)
            box.link_credentials(self.config.user_home, invocation.credentials)
        except (OSError, ValueError) as exc:
            raise ProviderError(
                Failure.SPAWN_FAILED,
                f"cannot prepare the private HOME for {self.provider}: {exc}",
                provider=self.provider,
            ) from exc
        return child_env(self.config, box, invocation.env)

    async def _exec(
        self, command: str, invocation: CliInvocation, box: Sandbox, env: dict[str, str]
    ) -> CliProcess:
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                command,
                *invocation.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=box.work,
                env=env,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise self.not_found() from exc
        except OSError as exc:
            raise ProviderError(
                Failure.SPAWN_FAILED, f"cannot start {command}: {exc}", provider=self.provider
            ) from exc
        log.debug("cli_spawned", provider=self.provider, pid=proc.pid, command=command)
        return CliProcess(
            self, proc, box.home, invocation.stdin, started, keep_stdin_open=invocation.keep_stdin_open
        )


class CliProcess:
    """One running child. Read `lines()` to EOF, then `wait()` for its exit status."""

    def __init__(
        self,
        runner: CliRunner,
        proc: asyncio.subprocess.Process,
        home: Path,
        stdin: bytes,
        started: float,
        *,
        keep_stdin_open: bool = False,
    ) -> None:
        self.home = home
        self.pid = proc.pid
        self._runner = runner
        self._name = Path(runner.command).name
        self._proc = proc
        timeouts = runner.config.timeouts
        self._first_byte_s = timeouts.first_byte_ms / 1000
        self._idle_s = timeouts.idle_ms / 1000
        self._total_s = timeouts.total_ms / 1000
        self._started = started
        self._got_byte = False
        self._stderr = bytearray()
        self._terminated = False
        self._keep_stdin_open = keep_stdin_open
        self._tasks = (
            asyncio.create_task(self._feed(stdin)),
            asyncio.create_task(self._drain_stderr()),
        )

    # -- reading -----------------------------------------------------------------------

    async def lines(self) -> AsyncIterator[bytes]:
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

    async def wait(self) -> int:
        """Exit status once stdout is done (negative: killed by that signal)."""
        deadline = min(self._started + self._total_s, time.monotonic() + self._idle_s)
        status = await self._exit_status(deadline)
        if status is None:
            raise self._timeout("closed its output but did not exit", self._idle_s, "idle")
        # Let the stderr reader take what the child wrote last (bounded: a grandchild
        # may hold the pipe open).
        with suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._tasks[1]), 0.2)
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
        now = time.monotonic()
        total_at = self._started + self._total_s
        if self._got_byte:
            at, kind, seconds = now + self._idle_s, "idle", self._idle_s
        else:
            at, kind, seconds = self._started + self._first_byte_s, "first-byte", self._first_byte_s
        if total_at <= at:
            at, kind, seconds = total_at, "total", self._total_s
        while True:
            left = at - time.monotonic()
            if left <= 0:
                raise self._timeout(_SILENCE[kind], seconds, kind)
            try:
                # Cancelling a pending read loses nothing: data is only taken on return.
                chunk = await asyncio.wait_for(stdout.read(_CHUNK), min(left, _EXIT_POLL_S * 5))
            except TimeoutError:
                # The child exited but a grandchild still holds stdout open: what the
                # child wrote has been read, so this is the end of its output.
                if self._proc.returncode is not None:
                    return b""
                continue
            if chunk:
                self._got_byte = True
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
        await asyncio.shield(self._tasks[0])
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
        while chunk := await stderr.read(4096):
            self._stderr += chunk
            if len(self._stderr) > 2 * STDERR_TAIL_BYTES:
                del self._stderr[:-STDERR_TAIL_BYTES]

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
            for task in self._tasks:
                task.cancel()
        if await self._exit_status(time.monotonic() + grace) is None:
            log.warning("cli_unreaped", provider=self._runner.provider, pid=self.pid)
        _close_transport(self._proc)
        log.debug(
            "cli_ended", provider=self._runner.provider, pid=self.pid, status=self._proc.returncode
        )


_SILENCE = {
    "first-byte": "wrote nothing",
    "idle": "went silent",
    "total": "did not finish",
}


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
