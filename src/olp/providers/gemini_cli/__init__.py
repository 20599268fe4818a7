"""`gemini-cli`: a Google account or a Gemini API key through Google's `gemini` CLI."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.gemini_cli.provider import GeminiCliProvider

__all__ = ["GeminiCliProvider", "plugin"]

plugin = ProviderPlugin(
    type="gemini-cli",
    factory=GeminiCliProvider,
    summary="Google account or Gemini key through `gemini -p` (token streaming)",
)
