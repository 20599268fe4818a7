"""`gemini-cli`: a Google account or a Gemini API key through Google's `gemini` CLI."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.gemini_cli import translate
from olp.providers.gemini_cli.provider import GeminiCliProvider
from olp.registry.known import KnownCli

__all__ = ["GeminiCliProvider", "plugin"]

plugin = ProviderPlugin(
    type="gemini-cli",
    factory=GeminiCliProvider,
    summary="Google account or Gemini key through `gemini -p` (token streaming)",
    cli=KnownCli(
        name="gemini",
        command=translate.DEFAULT_COMMAND,
        product="Google account",
        credential_files=translate.CREDENTIAL_FILES[:1],
        login_hint=translate.LOGIN_HINT,
        models=("gemini-2.5-pro", "gemini-2.5-flash"),
        default_model="gemini-2.5-pro",
        login_env=("GEMINI_API_KEY",),
    ),
)
