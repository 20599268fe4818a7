"""`anthropic-http`: Anthropic's Messages API with an API key."""

from __future__ import annotations

from olp.providers.anthropic_http.provider import AnthropicHttpProvider
from olp.providers.base import ProviderPlugin

__all__ = ["AnthropicHttpProvider", "plugin"]

plugin = ProviderPlugin(
    type="anthropic-http",
    factory=AnthropicHttpProvider,
    summary="Anthropic Messages API: POST {base_url}/v1/messages",
    default_api_key_env="ANTHROPIC_API_KEY",
)
