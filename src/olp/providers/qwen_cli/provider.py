"""The `qwen-cli` provider: thin I/O around `translate` and the shared CLI runner."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from olp.config.model import ProviderConfig
from olp.ir import ChatRequest, Event
from olp.providers._cli_provider import CliProvider
from olp.providers._cli_stream import stream_cli
from olp.providers.base import ProviderHealth
from olp.providers.qwen_cli import translate

if TYPE_CHECKING:
    from olp.providers._mcp_bridge import BridgedRun

__all__ = ["QwenCliProvider"]


class QwenCliProvider(CliProvider):
    """Qwen Code (`qwen`), headless, with Claude-compatible stream-json
    (tests/fixtures/cli/README.md §5).

    No `quota()`: Qwen Code reports no quota figures headless (tests/fixtures/cli/README.md §6).
    """

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(
            config, default_command=translate.DEFAULT_COMMAND, install_hint=translate.INSTALL_HINT
        )
        self.capabilities = self._capabilities(
            translate.DROPS, tool_choices=frozenset({"auto", "none"})
        )

    async def _run(self, request: ChatRequest, run: BridgedRun | None) -> AsyncGenerator[Event]:
        invocation = translate.build_invocation(
            request,
            self._config.env,
            session_id=str(uuid.uuid4()),
            tools_run=run,
        )
        translator = translate.QwenTranslator(
            self.name,
            time.time,
            self._runner.command,
            tool_schemas=None if run is None else {t.name: t.parameters for t in request.tools},
            parallel_tool_calls=request.parallel_tool_calls is not False,
            on_retry=None if run is None else run.retry_turn,
        )
        async for event in stream_cli(self._runner, invocation, translator):
            yield event

    async def health(self) -> ProviderHealth:
        return await self._health_logged_in(
            files=[src for src, _ in translate.CREDENTIALS],
            env_names=translate.CREDENTIAL_ENV,
            missing=f"no ~/{translate.CREDENTIALS[0][0]}, no API key in env",
            fix=(
                f"{translate.LOGIN_HINT}, or set "
                f"providers.{self.name}.env.OPENAI_API_KEY (and OPENAI_BASE_URL)"
            ),
            detail=f"; --auth-type {translate.auth_type(self._config.env)}",
        )
