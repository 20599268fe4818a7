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
  (`Failure.CONCURRENCY_LIMIT` when it is full);
- with `warm` > 0, an invocation that `waits_for_prompt` is served by a process started
  ahead when one of its key waits (`_warm_pool`); either way a replacement starts once the
  first content of the answer went to the client (`CliProcess.content_delivered`) or the
  run ended, so a starting CLI does not take the cores from the one the client waits for.
  Waiting processes do not count against `max_concurrent`;
- an invocation with `mcp_files` (client tools over OLP's MCP bridge, given by the
  `bridge` the runner was made with) gets an endpoint of the bridge for each child, named
  in the child's home files, and closed when the child ends. The request's `tools_run` is
  bound to it before the prompt; a child started ahead is taken only once it has listed
  the tools (so it has connected), and if it does not list the request's tools again in
  time it is stopped and a cold one started instead;
- on Linux every child gets SIGKILL when OLP dies, even by SIGKILL (parent-death signal).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import statistics
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, fields
from functools import cache
from typing import TYPE_CHECKING

from olp.config.model import ProviderConfig
from olp.errors import Failure, ProviderError
from olp.observability import event_logger
from olp.providers._cli_limits import Slots
from olp.providers._cli_process import CliProcess
from olp.providers._sandbox import Sandbox, child_env, resolve_binary
from olp.providers._warm_pool import DEFAULT_MAX_IDLE_S, WarmChild, WarmPool
from olp.providers.base import WarmStats

if TYPE_CHECKING:
    from olp.providers._mcp_bridge import BridgedRun, Endpoint, ToolBridge

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
    # Files written into the (otherwise empty) working directory, likewise.
    work_files: Mapping[str, bytes] = field(default_factory=dict)
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
    # The child reads its prompt (`stdin`) before it does anything that depends on the
    # request, so it can be started ahead and given the prompt later (the warm pool).
    waits_for_prompt: bool = False
    # Client tools over OLP's MCP bridge: the home files naming the child's bridge
    # endpoint, given its URL (written over `home_files`). Part of the warm key, so a
    # module-level function where the child may be started ahead.
    mcp_files: Callable[[str], Mapping[str, bytes]] | None = None
    # The request's tools, bound to the child's endpoint before its prompt (like `stdin`,
    # not part of the warm key).
    tools_run: BridgedRun | None = None

    def warm_key(self) -> Hashable:
        """Everything fixed when the child starts: all but `stdin` and `tools_run`,
        mappings sorted."""
        parts: list[object] = []
        for f in fields(self):
            if f.name in _PER_REQUEST:
                continue
            value = getattr(self, f.name)
            parts.append(tuple(sorted(value.items())) if isinstance(value, Mapping) else value)
        return tuple(parts)


_PER_REQUEST = frozenset({"stdin", "tools_run"})


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
        warm: int = 0,
        warm_max_idle_s: float = DEFAULT_MAX_IDLE_S,
        bridge: Callable[[], Awaitable[ToolBridge]] | None = None,
    ) -> None:
        """`bridge`: the MCP bridge for client tools (made on first use)."""
        self.provider = provider
        self.config = config
        self.command = config.command or default_command
        self.max_line_bytes = max_line_bytes
        self.install_hint = install_hint
        self.kill_grace_s = kill_grace_s
        self._bridge = bridge
        # Set by `retire()`: a child started ahead stops waiting to connect to its bridge.
        self._retired = asyncio.Event()
        self._slots = Slots(config.max_concurrent or DEFAULT_MAX_CONCURRENT, queue_size)
        self._live: set[CliProcess] = set()
        self._closed = False
        self._pool: WarmPool[CliInvocation] | None = None
        if warm > 0:
            self._pool = WarmPool(
                provider,
                warm,
                start=self._start_waiting,
                stop=self._stop_waiting,
                stamp=self._credentials_stamp,
                max_idle_s=warm_max_idle_s,
            )
        # Seconds to a child's first content delivered: from its start (cold) or its prompt.
        self._first_content: dict[bool, deque[float]] = {
            False: deque(maxlen=_SAMPLES),
            True: deque(maxlen=_SAMPLES),
        }

    @property
    def active(self) -> int:
        """Children running now (or being set up / torn down)."""
        return self._slots.active

    @property
    def max_concurrent(self) -> int:
        return self._slots.limit

    @property
    def warm(self) -> WarmStats | None:
        """The warm pool's figures (status page, metrics); None without a pool."""
        pool = self._pool
        if pool is None:
            return None
        return WarmStats(
            size=pool.size,
            waiting=pool.waiting,
            starting=pool.starting,
            serving=self.active,
            hits=pool.hits,
            misses=pool.misses,
            cold_start_ms_p50=_p50_ms(self._first_content[False]),
            warm_start_ms_p50=_p50_ms(self._first_content[True]),
        )

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

    async def retire(self) -> None:
        """Stop the waiting processes and start no more; running children go on."""
        self._retired.set()
        if self._pool is not None:
            await self._pool.aclose()

    async def aclose(self) -> None:
        """Kill every live and waiting child (OLP is shutting down); later spawns fail."""
        self._closed = True
        live = list(self._live)
        await asyncio.gather(self.retire(), *(p.terminate() for p in live), return_exceptions=True)

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
            pool = self._pool if invocation.waits_for_prompt else None
            warm = await self._take_warm(pool, invocation) if pool is not None else None
            box = warm.box if warm is not None else self._new_sandbox()
            endpoint = warm.endpoint if warm is not None else None
            try:
                if warm is not None:
                    process = warm.process
                    process.begin(invocation.stdin)
                else:
                    endpoint = await self._open_endpoint(invocation)
                    if endpoint is not None and invocation.tools_run is not None:
                        await endpoint.bind(invocation.tools_run)  # not connected: at once
                    env = self._prepare(box, invocation, endpoint)
                    process = await self._exec(command, invocation, box, env, invocation.stdin)
                refill = self._refill_once(pool, invocation)
                if pool is not None:  # a request that could use the pool (not `--version`)
                    process.on_first_content = self._on_first_content(process, refill)
                self._live.add(process)
                try:
                    yield process
                finally:
                    self._live.discard(process)
                    await process.terminate()
                    refill()
            finally:
                if endpoint is not None:
                    endpoint.close()
                box.remove()
        finally:
            self._slots.release()

    async def _take_warm(
        self, pool: WarmPool[CliInvocation], invocation: CliInvocation
    ) -> WarmChild | None:
        """A waiting child for `invocation`, its endpoint (if any) bound to the request's
        tools; None if there is none, or if it did not take the tools in time."""
        child = pool.take(invocation.warm_key(), invocation)
        run = invocation.tools_run
        if child is None or child.endpoint is None or run is None:
            return child
        try:
            bound = await child.endpoint.bind(run)
        except BaseException:  # the request was cancelled: the child is nobody's now
            pool.discard(child)
            raise
        if bound:
            return child
        log.warning("cli_warm_unbound", provider=self.provider, pid=child.process.pid)
        pool.count_as_miss()
        pool.discard(child)
        return None

    async def _open_endpoint(self, invocation: CliInvocation) -> Endpoint | None:
        """A bridge endpoint for a child of `invocation`, if it takes client tools."""
        if invocation.mcp_files is None:
            return None
        if self._bridge is None:
            raise ProviderError(
                Failure.SPAWN_FAILED,
                f"{self.provider}: client tools need an MCP bridge and this runner has none",
                provider=self.provider,
            )
        return await (await self._bridge()).open()

    def _new_sandbox(self) -> Sandbox:
        return Sandbox.create(self.provider, self.config.inherited_env.get("TMPDIR"))

    def _refill_once(
        self, pool: WarmPool[CliInvocation] | None, invocation: CliInvocation
    ) -> Callable[[], None]:
        done = pool is None or self._closed

        def refill() -> None:
            nonlocal done
            if not done and pool is not None:
                done = True
                pool.refill(invocation.warm_key(), invocation)

        return refill

    def _on_first_content(
        self, process: CliProcess, refill: Callable[[], None]
    ) -> Callable[[float], None]:
        def first_content(seconds: float) -> None:
            self._first_content[process.started_ahead].append(seconds)
            refill()

        return first_content

    async def _start_waiting(self, invocation: CliInvocation) -> WarmChild:
        """A child of `invocation` started ahead, waiting for its prompt."""
        command = self.resolve_command()
        if command is None:
            raise self.not_found()
        stamp = self._credentials_stamp(invocation)
        box = self._new_sandbox()
        endpoint: Endpoint | None = None
        try:
            endpoint = await self._open_endpoint(invocation)
            env = self._prepare(box, invocation, endpoint)
            process = await self._exec(command, invocation, box, env, None)
        except BaseException:
            if endpoint is not None:
                endpoint.close()
            box.remove()
            raise
        child = WarmChild(process, box, stamp, endpoint)
        if endpoint is not None:
            await self._wait_connected(child)
        return child

    async def _wait_connected(self, child: WarmChild) -> None:
        """Until a child started ahead has listed its endpoint's tools (none yet): only
        then can it be told of the request's. Stops it if it exits or takes too long;
        returns at once when the runner retires (the closed pool stops the child)."""
        assert child.endpoint is not None
        waits = {
            asyncio.ensure_future(child.endpoint.listed.wait()),
            asyncio.ensure_future(child.process.exited_within(_CONNECT_S)),
            asyncio.ensure_future(self._retired.wait()),
        }
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if child.endpoint.listed.is_set() or self._retired.is_set():
            return
        await self._stop_waiting(child)
        status = child.process.returncode
        why = (
            f"did not connect to OLP's MCP bridge within {_CONNECT_S:g}s"
            if status is None
            else f"exited (status {status}) before it connected to OLP's MCP bridge"
        )
        raise ProviderError(
            Failure.SPAWN_FAILED,
            f"{self.provider} started ahead for client tools {why} (is 127.0.0.1 in the "
            f"NO_PROXY of its env?): {child.process.stderr_tail()[-300:]}",
            provider=self.provider,
        )

    @staticmethod
    async def _stop_waiting(child: WarmChild) -> None:
        try:
            await child.process.terminate()
        finally:
            if child.endpoint is not None:
                child.endpoint.close()
            child.box.remove()

    def _credentials_stamp(self, invocation: CliInvocation) -> Hashable:
        """The owner's credential files' modification times (None: absent)."""
        home = self.config.user_home
        if home is None:
            return ()
        stamp: list[int | None] = []
        for source, _ in invocation.credentials:
            try:
                stamp.append((home / source).stat().st_mtime_ns)
            except (OSError, ValueError):
                stamp.append(None)
        return tuple(stamp)

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

    def _prepare(
        self, box: Sandbox, invocation: CliInvocation, endpoint: Endpoint | None
    ) -> dict[str, str]:
        """The child's files written, its environment made. `endpoint`: its bridge endpoint
        (`invocation.mcp_files` names it)."""
        home_files = invocation.home_files
        if endpoint is not None and invocation.mcp_files is not None:
            home_files = {**home_files, **invocation.mcp_files(endpoint.url)}
        try:
            box.write_home_files(home_files)
            box.write_work_files(invocation.work_files)
            box.link_home(invocation.home_links)
            box.link_credentials(self.config.user_home, invocation.credentials)
        except (OSError, ValueError) as exc:
            raise ProviderError(
                Failure.SPAWN_FAILED,
                f"cannot prepare the private HOME and working directory for {self.provider}: {exc}",
                provider=self.provider,
            ) from exc
        return child_env(self.config, box, invocation.env)

    async def _exec(
        self,
        command: str,
        invocation: CliInvocation,
        box: Sandbox,
        env: dict[str, str],
        stdin: bytes | None,
    ) -> CliProcess:
        """Start the child; `stdin` None: it waits for `CliProcess.begin(prompt)`."""
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
                preexec_fn=_die_with_parent(),
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
            stdin,
            started,
            keep_stdin_open=invocation.keep_stdin_open,
            whole_messages=invocation.prints_whole_messages,
            work=box.work,
        )


_SAMPLES = 64
# How long a child started ahead may take to connect to its bridge endpoint (it starts on
# a machine busy with other children).
_CONNECT_S = 60.0


def _p50_ms(samples: deque[float]) -> float | None:
    return round(statistics.median(samples) * 1000, 1) if samples else None


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """What the child runs before exec so the kernel kills it when OLP dies (Linux)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def set_parent_death_signal() -> None:
        # Only a call prepared before the fork: nothing here may take a lock.
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # OLP died before the signal was set
            os._exit(1)

    return set_parent_death_signal


@cache
def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl
