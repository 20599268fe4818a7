"""The `codex-cli` provider: thin I/O around `translate`/`events` and the shared runner.

One `codex app-server` process per request, spoken to over stdio (JSON-RPC): the
handshake and the turn are driven by `events.AppServerTurn`; this module moves bytes,
names the MCP bridge endpoint serving a request's tools in the run's `config.toml` (the
runner opens it: `CliInvocation.mcp_files`), keeps the latest rate-limit snapshot for
`quota()`, and checks health without calling a model (`codex --version`, `codex login
status`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from olp.config.model import ProviderConfig
from olp.errors import ProviderError
from olp.ir import ChatRequest, Event, is_content
from olp.providers._cli_provider import CliProvider
from olp.providers._prompt import COMMON_CLI_DROPS, DEFAULT_SYSTEM_PROMPT, serialise
from olp.providers._subprocess import CliInvocation
from olp.providers.base import ProviderHealth, QuotaSnapshot
from olp.providers.codex_cli import translate
from olp.providers.codex_cli.events import AppServerTurn
from olp.providers.codex_cli.tool_calls import ToolCallReader

if TYPE_CHECKING:
    from olp.providers._mcp_bridge import BridgedRun

__all__ = ["DROPS", "CodexCliProvider"]

# Client tools go through the MCP bridge; a `tool_choice` it cannot honour is refused.
DROPS = (
    *(d for d in COMMON_CLI_DROPS if not d.startswith("tool")),
    "max_tokens",
    "image detail",
)
HONOURED = frozenset({"reasoning_effort"})
# With client tools bridged, `tool_choice` auto/none and `parallel_tool_calls` are
# honoured too (none: no bridge; false: only the first call of a response is answered).
HONOURED_WITH_TOOLS = HONOURED | {"tools", "tool_choice", "parallel_tool_calls"}


class CodexCliProvider(CliProvider):
    """ChatGPT (or an OpenAI Responses API key) through the `codex` CLI."""

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(
            config, default_command=translate.DEFAULT_COMMAND, install_hint=translate.INSTALL_HINT
        )
        self._upstream = translate.upstream_from_env(config.env)
        self.capabilities = self._capabilities(
            DROPS,
            vision=True,
            quota_signals=("five_hour",),
            tool_choices=frozenset({"auto", "none"}),
        )
        self._quota: QuotaSnapshot | None = None

    async def _run(self, request: ChatRequest, run: BridgedRun | None) -> AsyncGenerator[Event]:
        honoured = HONOURED_WITH_TOOLS if request.tools else HONOURED
        schema = translate.output_schema(request)
        # With a schema, the turn's `outputSchema` says it: no instruction in the prompt.
        flat = request if schema is None else replace(request, response_format=None)
        cli = serialise(flat, keep_images=True, honoured=honoured)
        images = tuple(image.url for image in cli.images)
        tools = None
        if run is not None:
            tools = ToolCallReader(
                self.name,
                {tool.name: tool.parameters for tool in request.tools},
                parallel=request.parallel_tool_calls is not False,
                on_retry=partial(run.retry_turn, last=True),
            )
        turn = AppServerTurn(self.name, request.model, cli.prompt, images, tools, schema)
        # Never Codex's own coding-agent instructions: the request's, or a neutral one.
        system = cli.system or DEFAULT_SYSTEM_PROMPT
        async with self._runner.spawn(self._invocation(request, system, turn, run)) as proc:
            try:
                async for line in proc.lines():
                    events, reply = turn.feed(line)
                    if reply:
                        await proc.send(reply)
                    proc.answered(turn.answer_lines)
                    for event in events:
                        yield event
                        if is_content(event):
                            proc.content_delivered()
                    if turn.done:
                        return
                status = await proc.wait()
                for event in turn.ended(status, proc.stderr_tail()):
                    yield event
            finally:
                if turn.quota is not None:
                    self._quota = turn.quota

    def _invocation(
        self, request: ChatRequest, system: str, turn: AppServerTurn, run: BridgedRun | None
    ) -> CliInvocation:
        """`run`: the request's client tools when they are bridged, or None."""

        def files(mcp_url: str | None) -> dict[str, bytes]:
            """The home files; `mcp_url`: the bridge endpoint serving the tools."""
            config = translate.config_toml(
                request.model,
                upstream=self._upstream,
                has_system=bool(system),
                idle_timeout_ms=self._config.timeouts.idle_ms,
                reasoning_effort=translate.reasoning_effort(request.extra),
                mcp_url=mcp_url,
            )
            return translate.home_files(config, system or None, tools=mcp_url is not None)

        credentials = () if self._upstream else ((translate.AUTH_FILE, translate.AUTH_FILE),)
        return CliInvocation(
            args=translate.argv(),
            stdin=turn.opening(),
            keep_stdin_open=True,
            env={"NO_COLOR": "1", "RUST_LOG": "warn"},
            home_files=files(None) if run is None else {},
            credentials=credentials,
            # The server reads nothing of the request before its JSON-RPC opening: it can
            # be started ahead (off by default: `warm` 0, see docs/providers.md); but not
            # a bridged run (codex is not known to list an MCP server's tools again).
            waits_for_prompt=run is None,
            mcp_files=None if run is None else files,
            tools_run=run,
        )

    async def health(self) -> ProviderHealth:
        """Binary, version, credentials — without calling a model."""
        checks, failed = await self._binary_checks(short=True)
        if failed is not None:
            return failed
        if self._upstream is not None:
            return self._key_health(checks)
        status, said = await self._login_status()
        checks.append(f"login: {said or 'unknown'}")
        ok = status == 0
        if ok:
            checks.append(self._tools_check())
        return ProviderHealth(ok=ok, checks=tuple(checks), fix=None if ok else translate.LOGIN_HINT)

    def _key_health(self, checks: list[str]) -> ProviderHealth:
        assert self._upstream is not None
        key = self._upstream.env_key
        has_key = bool(self._config.env.get(key))
        checks.append(f"upstream: {self._upstream.base_url} (Responses API, retries off)")
        checks.append(
            f"credentials: {key} " + ("set in the provider's env" if has_key else "missing")
        )
        if has_key:
            checks.append(self._tools_check())
        fix = (
            None if has_key else f'set providers.{self.name}.env.{key} to "${{YOUR_KEY_VARIABLE}}"'
        )
        return ProviderHealth(ok=has_key, checks=tuple(checks), fix=fix)

    async def _login_status(self) -> tuple[int | None, str]:
        """`codex login status` with the owner's login linked in: exit 0 iff logged in."""
        invocation = CliInvocation(
            args=("login", "status"),
            env={"NO_COLOR": "1"},
            credentials=((translate.AUTH_FILE, translate.AUTH_FILE),),
        )
        try:
            async with asyncio.timeout(10), self._runner.spawn(invocation) as proc:
                lines = await proc.output()
                status = await proc.wait()
                said = [line.decode("utf-8", "replace") for line in lines]
                said += proc.stderr_tail().splitlines()
        except (ProviderError, TimeoutError) as exc:
            return None, getattr(exc, "message", "timed out")
        # Codex warns about PATH aliases under /tmp first; skip that.
        useful = [line.strip() for line in said if line.strip() and not line.startswith("WARNING")]
        return status, (useful[0] if useful else "")

    def quota(self) -> QuotaSnapshot | None:
        return self._quota
