"""`vibe-cli`: Le Chat Pro or a Mistral API key through Mistral's `vibe` CLI (`vibe -p`)."""

from __future__ import annotations

from olp.providers.base import ProviderPlugin
from olp.providers.vibe_cli import translate
from olp.providers.vibe_cli.provider import VibeCliProvider
from olp.registry.known import KnownCli

__all__ = ["VibeCliProvider", "plugin"]

plugin = ProviderPlugin(
    type="vibe-cli",
    factory=VibeCliProvider,
    summary="Le Chat Pro / Mistral key through `vibe -p` (whole messages)",
    cli=KnownCli(
        name="vibe",
        command=translate.DEFAULT_COMMAND,
        product="Le Chat Pro",
        credential_files=(translate.CREDENTIALS_FILE,),
        login_hint=translate.LOGIN_HINT,
        models=("devstral-medium-latest", "mistral-large-latest"),
        default_model="devstral-medium-latest",
    ),
)
