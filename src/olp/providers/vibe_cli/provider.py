"""The `vibe-cli` provider: thin I/O around `translate`/`events` and the shared runner."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from olp.config.model import ProviderConfig
from olp.ir import ChatRequest, Event
from olp.providers._cli_provider import CliProvider
from olp.providers._cli_stream import credential_check
from olp.providers._prompt import COMMON_CLI_DROPS, serialise
from olp.providers._subprocess import CliInvocation
from olp.providers.base import HopContext, ProviderHealth
from olp.providers.vibe_cli import translate
from olp.providers.vibe_cli.events import VibeStream

__all__ = ["DROPS", "VibeCliProvider"]

DROPS = (
    *COMMON_CLI_DROPS,
    "max_tokens",
    "images",
    "system prompt replacement (sent as the first part of the prompt)",
)
_EXPORT_CAP = 1024 * 1024


class VibeCliProvider(CliProvider):
    """Le Chat Pro / a Mistral key through Mistral's `vibe` CLI.

    No `quota()`: Vibe exposes nothing beyond the upstream's 429s.
    """

    def __init__(self, config: ProviderConfig) -> None:
        super().__init__(
            config, default_command=translate.DEFAULT_COMMAND, install_hint=translate.INSTALL_HINT
        )
        self._upstream = translate.upstream_from_env(config.env)
        self.capabilities = self._capabilities(DROPS, streaming="message")

    async def stream(self, request: ChatRequest, ctx: HopContext) -> AsyncIterator[Event]:
        request = self._with_system_prompt(request)
        cli = serialise(request)
        translator = VibeStream(self.name)
        async with self._runner.spawn(self._invocation(request, cli.system, cli.prompt)) as proc:
            async for line in proc.lines():
                events = translator.feed(line)
                proc.answered(translator.answer_lines)
                for event in events:
                    yield event
            status = await proc.wait()
            export = await asyncio.to_thread(_read_export, proc.work / translate.EXPORT_FILE)
            for event in translator.end(status, proc.stderr_tail(), export):
                yield event

    def _invocation(self, request: ChatRequest, system: str, prompt: str) -> CliInvocation:
        timeouts = self._config.timeouts
        config = translate.config_toml(
            request.model,
            self._upstream,
            request_timeout_s=max(timeouts.first_byte_ms, timeouts.idle_ms) / 1000,
            idle_s=timeouts.idle_ms / 1000,
        )
        return CliInvocation(
            args=translate.argv(),
            stdin=translate.prompt_text(system, prompt).encode(),
            env={"NO_COLOR": "1"},
            home_files={translate.CONFIG_FILE: config.encode()},
            credentials=((translate.CREDENTIALS_FILE, translate.CREDENTIALS_FILE),),
            # Silence on stdout is the model writing, not a stall: Vibe's own `api_timeout`
            # and `api_stream_idle_timeout` (above) watch the upstream instead.
            prints_whole_messages=True,
        )

    async def health(self) -> ProviderHealth:
        """Binary, version, credentials — without calling a model."""
        checks, failed = await self._binary_checks(short=True)
        if failed is not None:
            return failed
        checks.append(f"upstream: {self._upstream.api_base} (backend {self._upstream.backend})")
        found = credential_check(
            self._config.user_home,
            (translate.CREDENTIALS_FILE,),
            self._config.env,
            ("MISTRAL_API_KEY",),
        )
        return self._credentials(
            checks,
            found,
            missing=f"no MISTRAL_API_KEY, no ~/{translate.CREDENTIALS_FILE}",
            fix=translate.LOGIN_HINT,
        )


def _read_export(path: Path) -> Mapping[str, Any] | None:
    """Vibe's `--output-dir` export.json (usage, cost, error code), if it wrote one."""
    try:
        with path.open("rb") as f:
            data = f.read(_EXPORT_CAP)
        doc = orjson.loads(data)
    except (OSError, orjson.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None
