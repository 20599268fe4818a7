"""The `openai-http` provider: its `translate`, on the shared `HttpProvider`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

from olp.config.model import ProviderConfig
from olp.ir import ChatRequest, Event
from olp.providers._http_provider import HttpProvider, post_for_events
from olp.providers.base import Capabilities, HopContext
from olp.providers.openai_http import forward, translate

__all__ = ["DEFAULT_BASE_URL", "OpenAIHttpProvider"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIHttpProvider(HttpProvider):
    """Any OpenAI-compatible server: POST `{base_url}/chat/completions`."""

    models_path = "/models"
    default_api_key_env = "OPENAI_API_KEY"

    def __init__(self, config: ProviderConfig) -> None:
        headers: dict[str, str] = {}
        # Local servers (Ollama, llama.cpp) need no key; never send an empty bearer.
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        super().__init__(
            config,
            Capabilities(
                streaming="token",
                max_concurrent=config.max_concurrent,
                cacheable=config.cacheable,
                endpoints=frozenset({"chat", "embeddings", "completions"}),
            ),
            base_url=config.base_url or DEFAULT_BASE_URL,
            path="/chat/completions",
            headers=headers,
        )

    def stream(self, request: ChatRequest, ctx: HopContext) -> AsyncIterator[Event]:
        if request.forward is not None:
            return post_for_events(
                self.http,
                self.base_url + forward.forward_path(request),
                lambda: forward.forward_payload(request),
                partial(forward.forward_events, self.name),
                forward.ForwardStreamParser(self.name),
            )
        return post_for_events(
            self.http,
            self.url,
            lambda: translate.encode_payload(translate.build_payload(request)),
            partial(translate.events_from_response, self.name),
            translate.StreamParser(self.name),
        )
