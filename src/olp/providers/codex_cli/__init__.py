"""`codex-cli`: a ChatGPT subscription (or an OpenAI key) through OpenAI's `codex` CLI,
driven as `codex app-server` (JSON-RPC over stdio) for real token streaming."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.codex_cli.provider import CodexCliProvider

__all__ = ["CodexCliProvider", "plugin"]

plugin = ProviderPlugin(
    type="codex-cli",
    factory=CodexCliProvider,
    summary="ChatGPT plan or OpenAI key through `codex app-server` (token streaming)",
)
