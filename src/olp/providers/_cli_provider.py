"""What every subscription-CLI provider shares, so each `provider.py` keeps only its own.

    class QwenCliProvider(CliProvider):
        def __init__(self, config: ProviderConfig) -> None:
            super().__init__(config, default_command=..., install_hint=...)
            self.capabilities = self._capabilities(translate.DROPS)

A `CliProvider` owns the `CliRunner`, builds the capabilities every CLI has in common (no
client tools unless the CLI bridges them, no sampling, JSON mode as an instruction, the
runner's concurrency), reports no quota unless the provider overrides `quota()`, stops its
waiting processes (the warm pool) in `retire()` and kills its children in `aclose()`.
`stream()` adds the owner's `system_prompt` and, for a request whose client tools the CLI
takes (`bridges_tools`), makes them a `BridgedRun` for the subclass's `_run()`, which
starts the CLI with them (`CliInvocation.tools_run`): the runner serves them to the child
on this provider's MCP bridge (made on the first such request, closed with the provider).
The server calls `preload()` in a thread once it listens, so that the first request with
tools does not wait for the MCP SDK to import.

`health()` stays in each provider (what "logged in" means differs) but is assembled from
the shared steps: `_binary_checks()` (binary found + `--version`), then `_credentials()`
for the login check and its fix command; or all of it, timed, in `_health_logged_in()`
(claude, qwen). The two wordings in use are kept as they are (`short=True`: codex, gemini
and vibe).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar, Literal

from olp.config.model import ProviderConfig
from olp.errors import ProviderError
from olp.ir import ChatRequest, Event, Message
from olp.providers._cli_stream import cli_version, credential_check
from olp.providers._prompt import bridges_tools
from olp.providers._subprocess import CliRunner
from olp.providers.base import Capabilities, HopContext, ProviderHealth, QuotaSnapshot

if TYPE_CHECKING:
    from olp.providers._mcp_bridge import BridgedRun, ToolBridge

__all__ = ["CliProvider"]

_BRIDGE_MODULE = "olp.providers._mcp_bridge"


class CliProvider:
    """The shared half of a CLI provider; subclasses add `_run()` (or their own `stream()`)
    and `health()`."""

    name: str
    capabilities: Capabilities
    # Parameters the CLI adds to every tool it declares: not the client's, so the bridge
    # leaves them out of its argument check.
    added_tool_parameters: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        config: ProviderConfig,
        *,
        default_command: str,
        install_hint: str,
        warm_default: int = 0,
    ) -> None:
        """`warm_default`: processes kept waiting when the config does not say (`warm`)."""
        self.name = config.name
        self._config = config
        self._install_hint = install_hint
        self._runner = CliRunner(
            config.name,
            config,
            default_command=default_command,
            install_hint=install_hint,
            warm=config.warm if config.warm is not None else warm_default,
            bridge=self._tool_bridge,
        )
        self._bridge: ToolBridge | None = None
        self._bridge_loaded: ModuleType | None = None

    @property
    def runner(self) -> CliRunner:
        """Children running now and the concurrency limit (status page, metrics)."""
        return self._runner

    def _capabilities(
        self,
        drops: tuple[str, ...],
        *,
        streaming: Literal["token", "message"] = "token",
        vision: bool = False,
        quota_signals: tuple[str, ...] = (),
        reports_cost: bool = False,
        tool_choices: frozenset[str] = frozenset(),
    ) -> Capabilities:
        """`tool_choices`: what the CLI honours of client tools through the MCP bridge
        (none: it cannot take client tools at all)."""
        return Capabilities(
            streaming=streaming,
            tools=bool(tool_choices),
            tool_choices=tool_choices,
            vision=vision,
            json_mode=True,  # as an instruction in the system prompt
            sampling=False,
            max_concurrent=self._runner.max_concurrent,
            cacheable=self._config.cacheable,
            drops=drops,
            quota_signals=quota_signals,
            reports_cost=reports_cost,
        )

    async def _binary_checks(
        self, *, short: bool = False
    ) -> tuple[list[str], ProviderHealth | None]:
        """`binary: …` and `version: …`, and the failed health if either is missing."""
        runner, hint = self._runner, self._install_hint
        path = runner.resolve_command()
        if path is None:
            if short:
                checks = (f"binary: {runner.command} not found",)
                fix = f"{hint} (or set providers.{self.name}.command)"
            else:
                checks, fix = (f"binary: {runner.not_found().message}",), hint
            return [], ProviderHealth(False, checks, fix)
        found = [f"binary: {path}"]
        try:
            found.append(f"version: {await cli_version(runner)}")
        except ProviderError as exc:
            if short:
                found.append(f"version: {exc.message}")
                return found, ProviderHealth(False, tuple(found), hint)
            found.append(f"version: failed ({exc.message})")
            return found, ProviderHealth(False, tuple(found), f"reinstall: {hint}")
        return found, None

    async def _health_logged_in(
        self,
        *,
        files: Sequence[str],
        env_names: Sequence[str],
        missing: str,
        fix: str,
        detail: str = "",
    ) -> ProviderHealth:
        """The binary checks, then `logged in: yes (<source><detail>)` and the drops, or
        `logged in: no (<missing>)` with `fix`; timed unless the binary checks failed."""
        started = time.perf_counter()
        checks, failed = await self._binary_checks()
        if failed is not None:
            return failed
        config = self._config
        source = credential_check(config.user_home, files, config.env, env_names)
        latency = round((time.perf_counter() - started) * 1000, 1)
        if source is None:
            checks.append(f"logged in: no ({missing})")
            return ProviderHealth(False, tuple(checks), fix, latency)
        checks.append(f"logged in: yes ({source}{detail})")
        checks.append("drops: " + ", ".join(self.capabilities.drops))
        checks.append(self._tools_check())
        return ProviderHealth(True, tuple(checks), None, latency)

    def _tools_check(self) -> str:
        """What `olp doctor` says of client tools (a request it cannot honour skips it)."""
        choices = self.capabilities.tool_choices
        if not self.capabilities.tools:
            return "client tools: no (a request with tools skips this provider)"
        return "client tools: yes, over MCP (tool_choice: " + ", ".join(sorted(choices)) + ")"

    def _credentials(
        self, checks: list[str], found: str | None, *, missing: str, fix: str
    ) -> ProviderHealth:
        """`credentials: <found>`, or `credentials: none (<missing>)` with `fix`."""
        checks.append(f"credentials: {found or f'none ({missing})'}")
        if found is not None:
            checks.append(self._tools_check())
        return ProviderHealth(
            ok=found is not None, checks=tuple(checks), fix=None if found else fix
        )

    def _with_system_prompt(self, request: ChatRequest) -> ChatRequest:
        """The request with the owner's `system_prompt` after the client's own (if set)."""
        extra = self._config.system_prompt
        if not extra:
            return request
        return replace(request, messages=(*request.messages, Message("system", extra)))

    async def stream(self, request: ChatRequest, ctx: HopContext) -> AsyncIterator[Event]:
        request = self._with_system_prompt(request)
        if not (self.capabilities.tools and bridges_tools(request)):
            async with contextlib.aclosing(self._run(request, None)) as events:
                async for event in events:
                    yield event
            return
        module = await self._bridge_module()
        run: BridgedRun = module.BridgedRun(request.tools, self.added_tool_parameters)
        try:
            async with contextlib.aclosing(self._run(request, run)) as events:
                async for event in events:
                    yield event
        finally:
            # Only once the run (and its child) ended, also when the consumer stopped
            # early, does the bridge let go of the calls it holds: a CLI told "not run"
            # could go on.
            run.end()

    def _run(self, request: ChatRequest, run: BridgedRun | None) -> AsyncGenerator[Event]:
        """The CLI's run for `request`, with `run` its bridged tools (None: none)."""
        raise NotImplementedError

    def preload(self) -> None:
        """Import the MCP bridge if this provider takes client tools. Blocking: the server
        calls it in a thread once it listens (`OLPApp.on_listening`)."""
        if self.capabilities.tools:
            importlib.import_module(_BRIDGE_MODULE)

    async def _tool_bridge(self) -> ToolBridge:
        """This provider's MCP bridge for client tools, started on first use."""
        if self._bridge is None:
            bridge_type: type[ToolBridge] = (await self._bridge_module()).ToolBridge
            if self._bridge is None:  # (another request may have made it meanwhile)
                self._bridge = bridge_type(self.name)
        return self._bridge

    async def _bridge_module(self) -> ModuleType:
        """The MCP bridge's module. The MCP SDK takes a second or more to import.
        `preload()` has usually done it by now; if not (a provider added by a config
        reload, a request in the first second), only a request with tools waits, and in
        a thread, so that the server answers every other request meanwhile (an import
        under way in `preload()`'s thread is waited for, not seen half done)."""
        if self._bridge_loaded is None:
            self._bridge_loaded = await asyncio.to_thread(importlib.import_module, _BRIDGE_MODULE)
        return self._bridge_loaded

    def quota(self) -> QuotaSnapshot | None:
        return None

    async def retire(self) -> None:
        await self._runner.retire()

    async def aclose(self) -> None:
        await self._runner.aclose()
        if self._bridge is not None:
            await self._bridge.aclose()
