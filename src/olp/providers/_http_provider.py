"""What both HTTP providers share: the provider's I/O, and the loop that reads an answer.

`HttpProvider` holds the pooled client and answers `health`, `quota` and `aclose`; a
subclass names its endpoints and headers and supplies the translation. Its `stream`
hands `post_for_events` three pieces of translation: how to build the body, how to read a
JSON answer, and a parser for an event stream. The answer may be either, whichever was
asked for: some servers ignore `stream`, and errors may come as JSON with a 200, so the
loop goes by what came back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, ClassVar, Protocol

from olp.config.model import ProviderConfig
from olp.ir import Event
from olp.providers._http import HttpClient, stream_ended_early
from olp.providers.base import Capabilities, ProviderHealth, QuotaSnapshot
from olp.wire.sse import SSEMessage

__all__ = ["HttpProvider", "SSEParser", "http_health", "post_for_events"]


class SSEParser(Protocol):
    """A provider's stream translation: SSE messages in, IR events out."""

    done: bool  # the terminal message arrived

    def feed_message(self, message: SSEMessage) -> list[Event]: ...


class HttpProvider:
    """An HTTP API as a provider; subclasses add `stream` (via `post_for_events`)."""

    models_path: ClassVar[str]  # below the base URL: what `health` probes, never a model
    default_api_key_env: ClassVar[str]  # named in `health`'s fix for a rejected key

    def __init__(
        self,
        config: ProviderConfig,
        capabilities: Capabilities,
        *,
        base_url: str,
        path: str,
        headers: dict[str, str],
    ) -> None:
        self.name = config.name
        self.capabilities = capabilities
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + path
        self._api_key_env = config.api_key_env
        self._has_key = bool(config.api_key)
        self.http = HttpClient(
            config.name,
            config.timeouts,
            headers={**headers, **config.headers},  # the config's own headers win
            limit=config.max_concurrent,
        )

    async def health(self) -> ProviderHealth:
        return await http_health(
            self.http,
            base_url=self.base_url,
            models_url=self.base_url + self.models_path,
            api_key_env=self._api_key_env,
            has_key=self._has_key,
            default_api_key_env=self.default_api_key_env,
        )

    def quota(self) -> QuotaSnapshot | None:
        return self.http.quota()

    @property
    def queued_requests(self) -> int:
        """Requests that waited for a `max_concurrent` slot before being sent, since start."""
        return self.http.queued

    async def aclose(self) -> None:
        await self.http.aclose()


async def post_for_events(
    http: HttpClient,
    url: str,
    body: Callable[[], bytes],
    from_json: Callable[[Any], list[Event]],
    parser: SSEParser,
    headers: Mapping[str, str] | None = None,
) -> AsyncIterator[Event]:
    """POST `body()` to `url`; yield the answer's events, from JSON or from the stream.

    `headers`: this request's own, beside the provider's.

    `body` is called on the first iteration, before any I/O: a request that cannot be
    mapped fails there, without a call, as every provider error does.
    """
    payload = body()
    async with http.post(url, payload, headers) as call:
        if not call.is_event_stream:
            for event in from_json(await call.read_json()):
                yield event
            return
        while (messages := await call.next_messages()) is not None:
            for message in messages:
                events = parser.feed_message(message)
                if parser.done:
                    # Take the end of the body before the last events leave, so a consumer
                    # that stops at Finish still lets the connection go back to the pool.
                    await call.finish()
                    for event in events:
                        yield event
                    return
                for event in events:
                    yield event
        raise stream_ended_early(http.name)


async def http_health(
    client: HttpClient,
    *,
    base_url: str,
    models_url: str,
    api_key_env: str | None,
    has_key: bool,
    default_api_key_env: str,
) -> ProviderHealth:
    """Configured, credentials present, reachable — via a models listing, never a model."""
    checks = [f"configured: {base_url}"]
    fix: str | None = None
    missing_key = bool(api_key_env and not has_key)
    ok = not missing_key
    if missing_key:
        checks.append(f"credentials: {api_key_env} is not set")
        fix = f"set {api_key_env}"
    elif api_key_env:
        checks.append(f"credentials: {api_key_env} is set")
    else:
        checks.append("credentials: none configured")
    timeout_s = min(5.0, client.timeouts.connect_ms / 1000.0 + 2.0)
    status, problem, latency = await client.probe(models_url, timeout_s)
    if status is None:
        checks.append(f"reachable: no ({problem})")
        return ProviderHealth(False, tuple(checks), fix or f"check that {base_url} is reachable")
    if status in (401, 403) and missing_key:  # no key was sent: the refusal is expected
        checks.append(f"reachable: yes (HTTP {status} without a key, in {latency:g} ms)")
        return ProviderHealth(False, tuple(checks), fix, latency)
    if status in (401, 403):
        checks.append(f"reachable: yes, but the API key was rejected (HTTP {status})")
        env = api_key_env or default_api_key_env
        return ProviderHealth(False, tuple(checks), f"set {env} to a valid key", latency)
    if status >= 500:
        checks.append(f"reachable: upstream answered HTTP {status}")
        return ProviderHealth(False, tuple(checks), fix, latency)
    checks.append(f"reachable: yes (HTTP {status} in {latency:g} ms)")
    return ProviderHealth(ok, tuple(checks), fix, latency)
