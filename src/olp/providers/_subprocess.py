"""The shared CLI runner: every subscription CLI is spawned through here (docs/design.md §5–§6).

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
- OLP's own first-byte / idle / total deadlines → `Failure.TIMEOUT`, counted from the
  answer the translation finds in the output (`CliProcess.answered`), not from the
  CLI's own chatter; bounded line parsing
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
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

from olp.config.model import ProviderConfig
from olp.errors import Failure, ProviderError
from olp.observability import event_logger
from olp.providers._cli_limits import Slots
from olp.providers._cli_process import CliProcess
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
    # Symlinks made under the private HOME: relative path → target.
    home_links: Mapping[str, str] = field(default_factory=dict)
    # Leave stdin open after `stdin` was written, for a CLI that is spoken to over stdio
    # (codex app-server's JSON-RPC): write more with `CliProcess.send()`. Closed when the
    # child is terminated.
    keep_stdin_open: bool = False
    # The CLI prints each message only once it is complete (Vibe): nothing on stdout can
    # show the upstream's first byte or a stall, so only `total_ms` applies and the CLI's
    # own upstream timeouts (set by its provider) bound the rest.
    prints_whole_messages: bool = False


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
            box.link_home(invocation.home_links)
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
            self,
            proc,
            box.home,
            invocation.stdin,
            started,
            keep_stdin_open=invocation.keep_stdin_open,
            whole_messages=invocation.prints_whole_messages,
            work=box.work,
        )
