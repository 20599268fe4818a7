"""`claude-cli`: a Claude Pro/Max subscription (or an Anthropic key) through `claude -p`."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.claude_cli import translate
from olp.providers.claude_cli.provider import ClaudeCliProvider
from olp.registry.known import KnownCli

__all__ = ["ClaudeCliProvider", "plugin"]

plugin = ProviderPlugin(
    type="claude-cli",
    factory=ClaudeCliProvider,
    summary="Claude Code CLI: claude -p --output-format stream-json (token streaming)",
    cli=KnownCli(
        name="claude",
        command=translate.DEFAULT_COMMAND,
        product="Claude Pro/Max",
        credential_files=tuple(src for src, _ in translate.CREDENTIALS),
        login_hint=translate.LOGIN_HINT,
        models=("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"),
        default_model="claude-sonnet-4-5",
        login_env=("CLAUDE_CODE_OAUTH_TOKEN",),
    ),
)
