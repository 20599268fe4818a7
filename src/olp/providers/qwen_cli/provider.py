"""The `qwen-cli` provider: thin I/O around `translate` and the shared CLI runner."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from olp.config.model import ProviderConfig
from olp.errors import ProviderError
from olp.ir import ChatRequest, Event
from olp.providers._cli_stream import cli_version, credential_check, stream_cli
from olp.providers._subprocess import CliRunner
from olp.providers.base import Capabilities, HopContext, ProviderHealth, QuotaSnapshot
from olp.providers.qwen_cli import translate

__all__ = ["QwenCliProvider"]


class QwenCliProvider:
    """Qwen Code (`qwen`), headless, with Claude-compatible stream-json (cli-formats.md §5)."""

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
        )

    @property
    def runner(self) -> CliRunner:
        return self._runner

    async def stream(self, request: ChatRequest, ctx: HopContext) -> AsyncIterator[Event]:
        invocation = translate.build_invocation(request, self._config.env)
        translator = translate.QwenTranslator(self.name, time.time, self._runner.command)
        async for event in stream_cli(self._runner, invocation, translator):
            yield event

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
            checks.append("logged in: no (no ~/.qwen/oauth_creds.json, no API key in env)")
            fix = (
                "run `qwen` once and log in with /auth (Qwen OAuth), or set "
                f"providers.{self.name}.env.OPENAI_API_KEY (and OPENAI_BASE_URL)"
            )
            return ProviderHealth(False, tuple(checks), fix, latency)
        auth = translate.auth_type(self._config.env)
        checks.append(f"logged in: yes ({source}; --auth-type {auth})")
        checks.append("drops: " + ", ".join(translate.DROPS))
        return ProviderHealth(True, tuple(checks), None, latency)

    def quota(self) -> QuotaSnapshot | None:
        # Qwen Code reports no quota figures headless (cli-formats.md §8).
        return None

    async def aclose(self) -> None:
        await self._runner.aclose()
