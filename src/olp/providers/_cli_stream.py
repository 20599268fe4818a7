"""Drive one CLI call: spawn through the runner, feed stdout lines to a translator, end.

The translator (each provider's pure `translate.py`) decides what lines mean; this module
only owns the order of things, so every CLI provider handles salvage, unparsable lines
and early termination the same way:

    async for event in stream_cli(runner, invocation, translator):
        yield event

- each stdout line goes to `translator.feed(line)`; its events are yielded at once (token
  streaming) and it may raise `ProviderError` for an in-band error;
- a line the translator counts in `answer_lines` is progress (`CliProcess.answered`):
  it ends the first-byte wait and restarts the idle clock. The CLI's own init, status
  and heartbeat lines are not, so a CLI that talks while its upstream hangs still falls
  back after `first_byte_ms`;
- once `translator.done` (a terminal event was seen) reading stops: `end(None, stderr)`
  gives the last events and the child is terminated — no waiting for it to exit;
- a translator that also has `feed_stderr` (`StderrTranslator`) sees each stderr line as
  it comes; the first error it returns ends the run at once (the child is killed);
- a translator that also has `reply` (`ReplyTranslator`, for an invocation that keeps
  stdin open) may answer a line: what it returns is written to the CLI's stdin;
- at EOF, `end(exit_status, stderr_tail)` decides: final events, salvage
  (`Finish("length")` after content, docs/design.md §5 rule 4) or an error;
- with a `wake` event (`WakeTranslator`), something outside the output may make the
  translator done without another line: the MCP bridge received a call, so the model's
  turn is over though the CLI, waiting on the held call, prints nothing more. Each time
  it is set, the lines already written are read first (until the output has been quiet
  for 50 ms), then `woken()` gives its events.

Also `cli_version()` and `credential_check()` for `health()`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from olp.errors import Failure, ProviderError
from olp.ir import Event, Finish, Usage, is_content
from olp.observability import event_logger
from olp.providers._subprocess import CliInvocation, CliRunner

__all__ = [
    "LineTranslator",
    "ReplyTranslator",
    "StderrTranslator",
    "WakeTranslator",
    "cli_version",
    "credential_check",
    "exit_failure",
    "salvage",
    "stream_cli",
]

log = event_logger("olp.providers.cli")


class LineTranslator(Protocol):
    @property
    def done(self) -> bool:
        """A terminal event was seen: the answer is complete (or failed)."""
        ...

    @property
    def answer_lines(self) -> int:
        """Lines fed so far that were the upstream answering: a piece of the answer (text,
        reasoning, its framing, usage, the end) or an error the translation classifies —
        not the CLI's own init, status, retry or heartbeat lines. OLP's first-byte and
        idle deadlines count only these."""
        ...

    def feed(self, line: bytes) -> list[Event]:
        """Events for one stdout line (unparsable lines give none). May raise."""
        ...

    def end(self, status: int | None, stderr: str) -> list[Event]:
        """The closing events. `status`: the exit status, None if `done` ended the read."""
        ...


@runtime_checkable
class StderrTranslator(Protocol):
    """A translator that also reads the CLI's stderr as it comes (optional)."""

    def feed_stderr(self, line: bytes) -> ProviderError | None:
        """The error one stderr line means (ends the run at once), or None."""
        ...


@runtime_checkable
class ReplyTranslator(Protocol):
    """A translator that writes to the CLI's stdin as its lines come (optional)."""

    def reply(self) -> bytes | None:
        """What to write to the CLI after the line just fed (once), or None."""
        ...


@runtime_checkable
class WakeTranslator(Protocol):
    """A translator told of a `wake` event of `stream_cli` (optional)."""

    def woken(self) -> list[Event]:
        """Events for the wake-up (may make the translator `done`). May raise."""
        ...


# A wake-up is handled once the output has been quiet this long: a line the CLI wrote
# before it called the bridge (gemini writes a turn's calls, then makes them) is in the
# pipe already, and read within a few milliseconds.
_SETTLE_S = 0.05


async def stream_cli(
    runner: CliRunner,
    invocation: CliInvocation,
    translator: LineTranslator,
    *,
    wake: asyncio.Event | None = None,
) -> AsyncIterator[Event]:
    """`wake`: see the module docstring; the translator must be a `WakeTranslator`."""
    async with runner.spawn(invocation) as proc:
        if isinstance(translator, StderrTranslator):
            proc.watch_stderr(translator.feed_stderr)
        if wake is not None and not isinstance(translator, WakeTranslator):
            raise TypeError("a wake event needs a translator with woken()")
        replying = translator if isinstance(translator, ReplyTranslator) else None
        async with contextlib.aclosing(_lines_or_wake(proc.lines(), wake)) as source:
            async for line in source:
                if line is None:
                    assert isinstance(translator, WakeTranslator)
                    events = translator.woken()
                else:
                    events = translator.feed(line)
                if replying is not None and (reply := replying.reply()) is not None:
                    await proc.send(reply)
                proc.answered(translator.answer_lines)
                for event in events:
                    yield event
                    if is_content(event):
                        proc.content_delivered()
                if translator.done:
                    break
        status = None if translator.done else await proc.wait()
        for event in translator.end(status, proc.stderr_tail()):
            yield event


async def _lines_or_wake(
    lines: AsyncGenerator[bytes], wake: asyncio.Event | None
) -> AsyncGenerator[bytes | None]:
    """`lines`, and None each time `wake` is set (then cleared), lines written first."""
    if wake is None:
        async with contextlib.aclosing(lines):
            async for line in lines:
                yield line
        return
    next_line: asyncio.Future[bytes] | None = None
    woken: asyncio.Future[bool] | None = None
    try:
        while True:
            next_line = next_line or asyncio.ensure_future(anext(lines))
            woken = woken or asyncio.ensure_future(wake.wait())
            either: set[asyncio.Future[Any]] = {next_line, woken}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not next_line.done():  # woken: the lines already written first
                await asyncio.wait({next_line}, timeout=_SETTLE_S)
            if next_line.done():
                try:
                    line = next_line.result()
                except StopAsyncIteration:
                    return
                next_line = None
                yield line
                continue
            wake.clear()
            woken = None
            yield None
    finally:
        for pending in (next_line, woken):
            if pending is not None:
                pending.cancel()
        if next_line is not None and next_line.done() and not next_line.cancelled():
            next_line.exception()  # (a read that failed as the run ended: nothing to tell)
        if next_line is None or next_line.done():  # (a cancelled read ends `lines` itself)
            await lines.aclose()


def salvage(usage: Usage | None) -> list[Event]:
    """Content came, then the CLI died without its terminal event: a truncated success."""
    return [usage, Finish("length")] if usage is not None else [Finish("length")]


def exit_failure(
    provider: str, command: str, status: int | None, stderr: str, detail: str = ""
) -> ProviderError:
    """A CLI that ended without an answer: SPAWN_FAILED with what it said on stderr.

    Exit 126/127 from the shebang's interpreter (e.g. `env: 'node': No such file`) means
    the CLI cannot run here at all: CLI_NOT_FOUND.
    """
    tail = " ".join(stderr.split())[-600:]
    if status is None:
        what = "stopped"
    elif status < 0:
        what = f"was killed by signal {-status}"
    else:
        what = f"exited with status {status}"
    message = f"{command} {what}" + (f" {detail}" if detail else "")
    message += f"; stderr: {tail}" if tail else "; no stderr"
    missing = status in (126, 127) and ("No such file" in stderr or "not found" in stderr)
    failure = Failure.CLI_NOT_FOUND if missing else Failure.SPAWN_FAILED
    return ProviderError(failure, message, provider=provider)


async def cli_version(
    runner: CliRunner, args: Sequence[str] = ("--version",), timeout_s: float = 10.0
) -> str:
    """The CLI's version line, or raise ProviderError (not found, failed, timed out)."""
    try:
        async with asyncio.timeout(timeout_s), runner.spawn(CliInvocation(tuple(args))) as proc:
            lines = await proc.output()
            status = await proc.wait()
            stderr = proc.stderr_tail()
    except TimeoutError as exc:
        raise ProviderError(
            Failure.TIMEOUT,
            f"{runner.command} {' '.join(args)} did not answer in {timeout_s:g}s",
            provider=runner.provider,
        ) from exc
    text = next((ln.decode("utf-8", "replace").strip() for ln in lines if ln.strip()), "")
    if status != 0 or not text:
        raise exit_failure(runner.provider, runner.command, status, stderr)
    return text


def credential_check(
    user_home: Path | None,
    files: Sequence[str],
    env: Mapping[str, str],
    env_names: Sequence[str],
) -> str | None:
    """Where the credentials a CLI will use come from, or None if there are none."""
    for name in env_names:
        if env.get(name):
            return f"{name} set in the provider's env"
    if user_home is not None:
        for rel in files:
            if (user_home / rel).is_file():
                return f"~/{rel} present"
    return None
