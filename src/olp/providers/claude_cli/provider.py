"""The `claude-cli` provider: thin I/O around `translate` and the shared CLI runner."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from olp.config.model import ProviderConfig
from olp.errors import ProviderError
from olp.ir import ChatRequest, Event
from olp.providers._claude_stream import RateLimitInfo
from olp.providers._cli_stream import cli_version, credential_check, stream_cli
from olp.providers._subprocess import CliRunner
from olp.providers.base import Capabilities, HopContext, ProviderHealth, QuotaSnapshot
from olp.providers.claude_cli import translate

__all__ = ["ClaudeCliProvider"]


class ClaudeCliProvider:
    """A Claude subscription (or key) through `claude -p` (cli-formats.md §1)."""

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self._config = config
        self._runner = CliRunner(
            config.name,
            config,
            default_command=translate.DEFAULT_COMMAND,
            install_hint=translate.INSTALL_HINT,
        )
        self.capabilities = Capabilities(
            streaming="token",
            tools=False,
            vision=False,
            json_mode=True,  # as an instruction in the system prompt
            sampling=False,
            max_concurrent=self._runner.max_concurrent,
            cacheable=config.cacheable,
            drops=translate.DROPS,
            # Subscription runs report the rolling 5-hour window (rate_limit_event).
            quota_signals=("five_hour",),
        )
        self._rate_limit: RateLimitInfo | None = None
        self._rate_limit_at = 0.0

    @property
    def runner(self) -> CliRunner:
        return self._runner

    async def stream(self, request: ChatRequest, ctx: HopContext) -> AsyncIterator[Event]:
        invocation = translate.build_invocation(request, self._config.timeouts)
        translator = translate.ClaudeTranslator(
            self.name, time.time, self._remember, command=self._runner.command
        )
        async for event in stream_cli(self._runner, invocation, translator):
            yield event

    def _remember(self, info: RateLimitInfo) -> None:
        self._rate_limit = info
        self._rate_limit_at = time.time()

    async def health(self) -> ProviderHealth:
        started = time.perf_counter()
        path = self._runner.resolve_command()
        if path is None:
            return ProviderHealth(
                False, (f"binary: {self._runner.not_found().message}",), translate.INSTALL_HINT
            )
        checks = [f"binary: {path}"]
        try:
            checks.append(f"version: {await cli_version(self._runner)}")
        except ProviderError as exc:
            checks.append(f"version: failed ({exc.message})")
            return ProviderHealth(False, tuple(checks), f"reinstall: {translate.INSTALL_HINT}")
        source = credential_check(
            self._config.user_home,
            [src for src, _ in translate.CREDENTIALS],
            self._config.env,
            translate.CREDENTIAL_ENV,
        )
        latency = round((time.perf_counter() - started) * 1000, 1)
        if source is None:
            checks.append("logged in: no (no ~/.claude/.credentials.json, no API key in env)")
            fix = (
                "run `claude` once and log in with /login (or run `claude setup-token` and "
                f"set providers.{self.name}.env.CLAUDE_CODE_OAUTH_TOKEN)"
            )
            return ProviderHealth(False, tuple(checks), fix, latency)
        checks.append(f"logged in: yes ({source})")
        checks.append("drops: " + ", ".join(translate.DROPS))
        return ProviderHealth(True, tuple(checks), None, latency)

    def quota(self) -> QuotaSnapshot | None:
        info = self._rate_limit
        if info is None:
            return None
        rejected = info.status == "rejected"
        five_hour = None
        if info.kind == "five_hour":
            # A rejected window is used up, whether or not the event carried a figure.
            five_hour = 1.0 if rejected else info.utilisation
        return QuotaSnapshot(
            utilisation=info.utilisation if not rejected else 1.0,
            reset_at=info.resets_at,
            five_hour_utilisation=five_hour,
            source=f"claude rate_limit_event ({info.kind or 'unknown window'}, {info.status})",
            extra={"rejected": 1.0 if rejected else 0.0},
        )

    async def aclose(self) -> None:
        await self._runner.aclose()
