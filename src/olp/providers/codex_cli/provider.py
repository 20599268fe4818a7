"""The `codex-cli` provider: thin I/O around `translate`/`events` and the shared runner.

One `codex app-server` process per request, spoken to over stdio (JSON-RPC): the
handshake and the turn are driven by `events.AppServerTurn`; this module moves bytes,
keeps the latest rate-limit snapshot for `quota()`, and checks health without calling a
model (`codex --version`, `codex login status`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from olp.config.model import ProviderConfig
from olp.errors import ProviderError
from olp.ir import ChatRequest, Event
from olp.providers._prompt import COMMON_CLI_DROPS, serialise
from olp.providers._subprocess import CliInvocation, CliRunner
from olp.providers.base import Capabilities, HopContext, ProviderHealth, QuotaSnapshot
from olp.providers.codex_cli import translate
from olp.providers.codex_cli.events import AppServerTurn

__all__ = ["DROPS", "CodexCliProvider"]

DROPS = (*COMMON_CLI_DROPS, "max_tokens", "images", "n > 1")
_HEALTH_OUTPUT_CAP = 40


class CodexCliProvider:
    """ChatGPT (or an OpenAI Responses API key) through the `codex` CLI."""

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self._config = config
        self._runner = CliRunner(
            config.name,
            config,
            default_command=translate.DEFAULT_COMMAND,
            install_hint=translate.INSTALL_HINT,
        )
        self._upstream = translate.upstream_from_env(config.env)
        self.capabilities = Capabilities(
            streaming="token",
            tools=False,
            vision=False,
            json_mode=True,
            sampling=False,
            max_concurrent=self._runner.max_concurrent,
            cacheable=config.cacheable,
            drops=DROPS,
        )
        self._quota: QuotaSnapshot | None = None

    async def stream(self, request: ChatRequest, ctx: HopContext) -> AsyncIterator[Event]:
        cli = serialise(request, honoured=frozenset({"reasoning_effort"}))
        turn = AppServerTurn(self.name, request.model, cli.prompt)
        async with self._runner.spawn(self._invocation(request, cli.system, turn)) as proc:
            try:
                async for line in proc.lines():
                    events, reply = turn.feed(line)
                    if reply:
                        await proc.send(reply)
                    for event in events:
                        yield event
                    if turn.done:
                        return
                status = await proc.wait()
                for event in turn.ended(status, proc.stderr_tail()):
                    yield event
            finally:
                if turn.quota is not None:
                    self._quota = turn.quota

    def _invocation(self, request: ChatRequest, system: str, turn: AppServerTurn) -> CliInvocation:
        config = translate.config_toml(
            request.model,
            upstream=self._upstream,
            has_system=bool(system),
            idle_timeout_ms=self._config.timeouts.idle_ms,
            reasoning_effort=translate.reasoning_effort(request.extra),
        )
        credentials = () if self._upstream else ((translate.AUTH_FILE, translate.AUTH_FILE),)
        return CliInvocation(
            args=translate.argv(),
            stdin=turn.opening(),
            keep_stdin_open=True,
            env={"NO_COLOR": "1", "RUST_LOG": "warn"},
            home_files=translate.home_files(config, system or None),
            credentials=credentials,
        )

    async def health(self) -> ProviderHealth:
        command = self._runner.resolve_command()
        if command is None:
            return ProviderHealth(
                ok=False,
                checks=(f"binary: {self._runner.command} not found",),
                fix=f"{translate.INSTALL_HINT} (or set providers.{self.name}.command)",
            )
        checks = [f"binary: {command}"]
        version = await self._run(("--version",))
        checks.append(f"version: {version[1] or 'unknown'}")
        if self._upstream is not None:
            return self._key_health(checks)
        status, output = await self._run(("login", "status"), login=True)
        logged_in = status == 0 and "not logged in" not in output.lower()
        checks.append(f"login: {output or 'unknown'}")
        return ProviderHealth(
            ok=logged_in,
            checks=tuple(checks),
            fix=None if logged_in else f"{self._runner.command} login",
        )

    def _key_health(self, checks: list[str]) -> ProviderHealth:
        assert self._upstream is not None
        has_key = bool(self._config.env.get(self._upstream.env_key))
        checks.append(f"upstream: {self._upstream.base_url} (Responses API)")
        checks.append(
            f"credentials: {self._upstream.env_key} "
            + ("is set" if has_key else "is not set in the provider's env")
        )
        fix = None if has_key else (
            f'set providers.{self.name}.env.{self._upstream.env_key} = "${{YOUR_KEY_VAR}}"'
        )
        return ProviderHealth(ok=has_key, checks=tuple(checks), fix=fix)

    async def _run(self, args: tuple[str, ...], *, login: bool = False) -> tuple[int | None, str]:
        """Run a short command (no model call); its exit status and first output line."""
        credentials = ((translate.AUTH_FILE, translate.AUTH_FILE),) if login else ()
        invocation = CliInvocation(args=args, env={"NO_COLOR": "1"}, credentials=credentials)
        lines: list[str] = []
        try:
            async with self._runner.spawn(invocation) as proc:
                async for raw in proc.lines():
                    if len(lines) < _HEALTH_OUTPUT_CAP:
                        lines.append(raw.decode("utf-8", "replace").strip())
                status = await proc.wait()
                lines += proc.stderr_tail().splitlines()
        except ProviderError as exc:
            return None, exc.message
        useful = [line for line in lines if line and not line.startswith("WARNING:")]
        return status, (useful[0] if useful else "")

    def quota(self) -> QuotaSnapshot | None:
        return self._quota

    async def aclose(self) -> None:
        await self._runner.aclose()
