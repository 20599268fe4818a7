"""`anthropic-http`: Anthropic's Messages API with an API key."""

from __future__ import annotations

from olp.providers.anthropic_http.provider import AnthropicHttpProvider
from olp.providers.base import ProviderPlugin
from olp.registry.known import KnownApi

__all__ = ["AnthropicHttpProvider", "plugin"]

plugin = ProviderPlugin(
    type="anthropic-http",
    factory=AnthropicHttpProvider,
    summary="Anthropic Messages API: POST {base_url}/v1/messages",
    default_api_key_env=AnthropicHttpProvider.default_api_key_env,
    apis=(
        KnownApi(
            name="anthropic",
            key_env=AnthropicHttpProvider.default_api_key_env,
            base_url="https://api.anthropic.com",
            models=("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"),
            default_model="claude-sonnet-4-5",
            base_url_env="ANTHROPIC_BASE_URL",
        ),
    ),
)
