"""The `anthropic-http` provider: its `translate` and `events`, on the shared `HttpProvider`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from olp.config.model import ProviderConfig
from olp.ir import ChatRequest, Event
from olp.providers._http_provider import HttpProvider, SSEParser, post_for_events
from olp.providers.anthropic_http import events as parse
from olp.providers.anthropic_http import structured, translate
from olp.providers.base import Capabilities, HopContext

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_BASE_URL", "AnthropicHttpProvider"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


class AnthropicHttpProvider(HttpProvider):
    """Anthropic's Messages API: POST `{base_url}/v1/messages`."""

    models_path = "/v1/models"
    default_api_key_env = "ANTHROPIC_API_KEY"

    def __init__(self, config: ProviderConfig) -> None:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if config.api_key:
            headers["x-api-key"] = config.api_key
        super().__init__(
            config,
            Capabilities(
                streaming="token",
                max_concurrent=config.max_concurrent,
                cacheable=config.cacheable,
                prompt_cache_markers=True,
                drops=translate.DROPS,
            ),
            base_url=config.base_url or DEFAULT_BASE_URL,
            path="/v1/messages",
            headers=headers,
        )

    def stream(self, request: ChatRequest, ctx: HopContext) -> AsyncIterator[Event]:
        rf = request.response_format
        if rf is not None and rf.type != "text":
            return self._structured(request)
        return post_for_events(
            self.http,
            self.url,
            lambda: translate.encode_payload(translate.build_payload(self.name, request)),
            partial(parse.events_from_response, self.name),
            parse.StreamParser(self.name),
            translate.request_headers(request),
        )

    async def _structured(self, request: ChatRequest) -> AsyncIterator[Event]:
        """A request for JSON: its answer through a forced tool call (`structured`)."""
        answer = translate.json_answer_for(self.name, request)
        parser: SSEParser = parse.StreamParser(self.name)
        from_json: Callable[[Any], list[Event]] = partial(parse.events_from_response, self.name)
        if answer is not None:
            fold = structured.JsonAnswerEvents(self.name, answer)
            parser = structured.JsonAnswerStream(parser, fold)
            whole = from_json
            from_json = lambda doc: fold.take(whole(doc))  # noqa: E731
        events = post_for_events(
            self.http,
            self.url,
            lambda: translate.encode_payload(translate.build_payload(self.name, request, answer)),
            from_json,
            parser,
            translate.request_headers(request),
        )
        async for event in events:
            yield event
