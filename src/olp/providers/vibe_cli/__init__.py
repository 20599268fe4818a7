"""`vibe-cli`: Le Chat Pro or a Mistral API key through Mistral's `vibe` CLI (`vibe -p`)."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.vibe_cli.provider import VibeCliProvider

__all__ = ["VibeCliProvider", "plugin"]

plugin = ProviderPlugin(
    type="vibe-cli",
    factory=VibeCliProvider,
    summary="Le Chat Pro / Mistral key through `vibe -p` (whole messages)",
)
