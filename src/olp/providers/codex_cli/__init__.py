"""`codex-cli`: a ChatGPT subscription (or an OpenAI key) through OpenAI's `codex` CLI,
driven as `codex app-server` (JSON-RPC over stdio) for real token streaming."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.codex_cli import translate
from olp.providers.codex_cli.provider import CodexCliProvider
from olp.registry.known import KnownCli

__all__ = ["CodexCliProvider", "plugin"]

plugin = ProviderPlugin(
    type="codex-cli",
    factory=CodexCliProvider,
    summary="ChatGPT plan or OpenAI key through `codex app-server` (token streaming)",
    cli=KnownCli(
        name="codex",
        command=translate.DEFAULT_COMMAND,
        product="ChatGPT",
        credential_files=(translate.AUTH_FILE,),
        login_hint=translate.LOGIN_HINT,
        models=("gpt-5", "gpt-5-codex"),
        default_model="gpt-5",
    ),
)
