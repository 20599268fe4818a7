"""`claude-cli`: a Claude Pro/Max subscription (or an Anthropic key) through `claude -p`."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.claude_cli.provider import ClaudeCliProvider

__all__ = ["ClaudeCliProvider", "plugin"]

plugin = ProviderPlugin(
    type="claude-cli",
    factory=ClaudeCliProvider,
    summary="Claude Code CLI: claude -p --output-format stream-json (token streaming)",
)
