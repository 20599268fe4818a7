"""The `claude-cli` provider: thin I/O around `translate` and the shared CLI runner."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from olp.config.model import ProviderConfig
from olp.ir import ChatRequest, Event
from olp.providers._claude_stream import RateLimitInfo
from olp.providers._cli_provider import CliProvider
from olp.providers._cli_stream import stream_cli
from olp.providers.base import ProviderHealth, QuotaSnapshot
from olp.providers.claude_cli import translate

if TYPE_CHECKING:
    from olp.providers._mcp_bridge import BridgedRun

__all__ = ["ClaudeCliProvider"]


class ClaudeCliProvider(CliProvider):
    """A Claude subscription (or key) through `claude -p` (tests/fixtures/cli/README.md §1)."""

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(
            config,
            default_command=translate.DEFAULT_COMMAND,
            install_hint=translate.INSTALL_HINT,
            warm_default=translate.WARM_DEFAULT,
        )
        # Subscription runs report the rolling 5-hour window (rate_limit_event).
        self.capabilities = self._capabilities(
            translate.DROPS,
            quota_signals=("five_hour",),
            reports_cost=True,
            tool_choices=frozenset({"auto", "none"}),
        )
        self._rate_limit: RateLimitInfo | None = None

    async def _run(self, request: ChatRequest, run: BridgedRun | None) -> AsyncGenerator[Event]:
        invocation = translate.build_invocation(request, self._config.timeouts, run)
        translator = translate.ClaudeTranslator(
            self.name,
            time.time,
            self._remember,
            command=self._runner.command,
            tools=run is not None,
            parallel_tool_calls=request.parallel_tool_calls is not False,
            schema=translate.output_schema(request),
            tool_schemas={tool.name: tool.parameters for tool in request.tools} if run else None,
            on_retry=None if run is None else run.retry_turn,
            held_prompt=None if run is None else translate.held_prompt(request),
        )
        async for event in stream_cli(self._runner, invocation, translator):
            yield event

    def _remember(self, info: RateLimitInfo) -> None:
        self._rate_limit = info

    async def health(self) -> ProviderHealth:
        return await self._health_logged_in(
            files=[src for src, _ in translate.CREDENTIALS],
            env_names=translate.CREDENTIAL_ENV,
            missing=f"no ~/{translate.CREDENTIALS[0][0]}, no API key in env",
            fix=(
                f"{translate.LOGIN_HINT}; a setup token goes in "
                f"providers.{self.name}.env.CLAUDE_CODE_OAUTH_TOKEN"
            ),
        )

    def quota(self) -> QuotaSnapshot | None:
        info = self._rate_limit
        if info is None:
            return None
        rejected = info.status == "rejected"
        five_hour = info.kind == "five_hour"
        return QuotaSnapshot(
            utilisation=info.utilisation if not rejected else 1.0,
            reset_at=info.resets_at,
            # A rejected window is used up, whether or not the event carried a figure.
            five_hour_utilisation=(1.0 if rejected else info.utilisation) if five_hour else None,
            five_hour_reset_at=info.resets_at if five_hour else None,
            source=f"claude rate_limit_event ({info.kind or 'unknown window'}, {info.status})",
            extra={"rejected": 1.0 if rejected else 0.0},
        )
