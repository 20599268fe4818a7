"""The `anthropic-http` provider: thin I/O around `translate`/`events` and `_http`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

from olp.config.model import ProviderConfig
from olp.ir import ChatRequest, Event
from olp.providers._http import HttpClient, http_health
from olp.providers._http_events import post_for_events
from olp.providers.anthropic_http import events as parse
from olp.providers.anthropic_http import translate
from olp.providers.base import Capabilities, HopContext, ProviderHealth, QuotaSnapshot

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_BASE_URL", "AnthropicHttpProvider"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


class AnthropicHttpProvider:
    """Anthropic's Messages API: POST `{base_url}/v1/messages`."""

    def __init__(self, config: ProviderConfig) -> None:
        self.name = config.name
        self.capabilities = Capabilities(
            streaming="token",
            max_concurrent=config.max_concurrent,
            cacheable=config.cacheable,
            prompt_cache_markers=True,
            drops=translate.DROPS,
        )
        self._base_url = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
        self._url = f"{self._base_url}/v1/messages"
        self._api_key_env = config.api_key_env
        self._has_key = bool(config.api_key)
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if config.api_key:
            headers["x-api-key"] = config.api_key
        headers.update(config.headers)
        self._http = HttpClient(
            config.name, config.timeouts, headers=headers, limit=config.max_concurrent
        )

    def stream(self, request: ChatRequest, ctx: HopContext) -> AsyncIterator[Event]:
        return post_for_events(
            self._http,
            self._url,
            lambda: translate.encode_payload(translate.build_payload(self.name, request)),
            partial(parse.events_from_response, self.name),
            parse.StreamParser(self.name),
        )

    async def health(self) -> ProviderHealth:
        return await http_health(
            self._http,
            base_url=self._base_url,
            models_url=f"{self._base_url}/v1/models",
            api_key_env=self._api_key_env,
            has_key=self._has_key,
            default_api_key_env="ANTHROPIC_API_KEY",
        )

    def quota(self) -> QuotaSnapshot | None:
        return self._http.quota()

    async def aclose(self) -> None:
        await self._http.aclose()
