"""The read loop both HTTP providers share: one POST, and its answer as IR events.

The answer may be one JSON document or an event stream, whichever was asked for: some
servers ignore `stream`, and errors may come as JSON with a 200, so the loop goes by
what came back. Only the translation differs per provider (`from_json`, the parser).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from olp.ir import Event
from olp.providers._http import HttpClient, stream_ended_early
from olp.wire.sse import SSEMessage

__all__ = ["SSEParser", "post_for_events"]


class SSEParser(Protocol):
    """A provider's stream translation: SSE messages in, IR events out."""

    done: bool  # the terminal message arrived

    def feed_message(self, message: SSEMessage) -> list[Event]: ...


async def post_for_events(
    http: HttpClient,
    url: str,
    body: Callable[[], bytes],
    from_json: Callable[[Any], list[Event]],
    parser: SSEParser,
) -> AsyncIterator[Event]:
    """POST `body()` to `url`; yield the answer's events, from JSON or from the stream.

    `body` is called on the first iteration, before any I/O: a request that cannot be
    mapped fails there, without a call, as every provider error does.
    """
    payload = body()
    async with http.post(url, payload) as call:
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
