"""The `openai-http` provider: thin I/O around `translate` and the shared `_http` client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

from olp.config.model import ProviderConfig
from olp.ir import ChatRequest, Event
from olp.providers._http import HttpClient, http_health
from olp.providers._http_events import post_for_events
from olp.providers.base import Capabilities, HopContext, ProviderHealth, QuotaSnapshot
from olp.providers.openai_http import translate

__all__ = ["DEFAULT_BASE_URL", "OpenAIHttpProvider"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIHttpProvider:
    """Any OpenAI-compatible server: POST `{base_url}/chat/completions`."""

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self.capabilities = Capabilities(
            streaming="token", max_concurrent=config.max_concurrent, cacheable=config.cacheable
        )
        self._base_url = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
        self._url = f"{self._base_url}/chat/completions"
        self._api_key_env = config.api_key_env
        self._has_key = bool(config.api_key)
        headers: dict[str, str] = {}
        # Local servers (Ollama, llama.cpp) need no key; never send an empty bearer.
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        headers.update(config.headers)
        self._http = HttpClient(
            config.name, config.timeouts, headers=headers, limit=config.max_concurrent
        )

    def stream(self, request: ChatRequest, ctx: HopContext) -> AsyncIterator[Event]:
        return post_for_events(
            self._http,
            self._url,
            lambda: translate.encode_payload(translate.build_payload(request)),
            partial(translate.events_from_response, self.name),
            translate.StreamParser(self.name),
        )

    async def health(self) -> ProviderHealth:
        return await http_health(
            self._http,
            base_url=self._base_url,
            models_url=f"{self._base_url}/models",
            api_key_env=self._api_key_env,
            has_key=self._has_key,
            default_api_key_env="OPENAI_API_KEY",
        )

    def quota(self) -> QuotaSnapshot | None:
        return self._http.quota()

    async def aclose(self) -> None:
        await self._http.aclose()
