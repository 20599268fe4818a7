"""The `gemini-cli` provider: thin I/O around `translate`/`events` and the shared runner."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from functools import partial
from typing import TYPE_CHECKING

from olp.config.model import ProviderConfig
from olp.ir import ChatRequest, Event
from olp.providers._cli_provider import CliProvider
from olp.providers._cli_stream import credential_check, stream_cli
from olp.providers._prompt import COMMON_CLI_DROPS, DEFAULT_SYSTEM_PROMPT, serialise
from olp.providers._subprocess import CliInvocation
from olp.providers.base import ProviderHealth
from olp.providers.gemini_cli import translate
from olp.providers.gemini_cli.events import GeminiStream, GeminiTools

if TYPE_CHECKING:
    from olp.providers._mcp_bridge import BridgedRun

__all__ = ["DROPS", "GeminiCliProvider"]

# Client tools go through the MCP bridge; a `tool_choice` it cannot honour is refused.
DROPS = (*(d for d in COMMON_CLI_DROPS if not d.startswith("tool")), "max_tokens", "images")
# Passed on with client tools bridged (tool_choice none: the tools are not offered;
# parallel_tool_calls false: only the first call is answered).
_HONOURED_WITH_TOOLS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})
_KEY_VARS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


class GeminiCliProvider(CliProvider):
    """A Google account (or a Gemini API key) through Google's `gemini` CLI.

    No `quota()`: gemini has no headless quota query; 429 texts carry the signal.
    """

    added_tool_parameters = translate.ADDED_PARAMETERS

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(
            config, default_command=translate.DEFAULT_COMMAND, install_hint=translate.INSTALL_HINT
        )
        self._auth = translate.auth_type(config.env)
        self.capabilities = self._capabilities(DROPS, tool_choices=frozenset({"auto", "none"}))

    async def _run(self, request: ChatRequest, run: BridgedRun | None) -> AsyncGenerator[Event]:
        cli = serialise(request, honoured=_HONOURED_WITH_TOOLS if request.tools else frozenset())
        # Never Gemini CLI's own coding-agent prompt: the request's, or a neutral one.
        system = cli.system or DEFAULT_SYSTEM_PROMPT
        invocation = CliInvocation(
            args=translate.argv(request.model),
            stdin=cli.prompt.encode(),
            env=translate.child_env(system),
            home_files=translate.home_files(self._auth, system),
            mcp_files=None if run is None else partial(translate.settings_files, self._auth),
            tools_run=run,
            credentials=tuple((f, f) for f in translate.CREDENTIAL_FILES)
            if self._auth == "oauth-personal"
            else (),
        )
        if run is None:
            translator = GeminiStream(self.name)
        else:
            tools = GeminiTools(
                names={translate.gemini_tool_name(tool.name): tool.name for tool in request.tools},
                schemas={tool.name: tool.parameters for tool in request.tools},
                parallel=request.parallel_tool_calls is not False,
                on_retry=run.retry_turn,
            )
            translator = GeminiStream(self.name, tools)
        wake = None if run is None else run.called
        async for event in stream_cli(self._runner, invocation, translator, wake=wake):
            yield event

    async def health(self) -> ProviderHealth:
        """Binary, version, credentials — without calling a model."""
        checks, failed = await self._binary_checks(short=True)
        if failed is not None:
            return failed
        checks.append(f"auth: {self._auth}")
        found = credential_check(
            self._config.user_home, translate.CREDENTIAL_FILES[:1], self._config.env, _KEY_VARS
        )
        if self._auth == "vertex-ai":
            found = found or "Vertex AI (GOOGLE_GENAI_USE_VERTEXAI) set in the provider's env"
        return self._credentials(
            checks,
            found,
            missing="no GEMINI_API_KEY, not logged in",
            fix=(
                f"{translate.LOGIN_HINT}, or set "
                f'providers.{self.name}.env.GEMINI_API_KEY to "${{GEMINI_API_KEY}}"'
            ),
        )
