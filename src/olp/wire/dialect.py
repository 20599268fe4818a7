"""What a client-facing wire must provide to be served: the `Dialect` contract (pure).

OLP has one request pipeline (`olp.server.chat.handle`): authenticate, read the body,
route, run the chain with fallback, the cache, keys, limits and the ledger, and answer.
Only two things in it depend on the wire the client speaks: how a body becomes an
`ir.ChatRequest`, and how the answer (events, a whole response, an error) is written
back. A `Dialect` is exactly those two things, so a new wire is a new package beside
`wire/openai_chat/` and the pipeline does not change.
"""

from __future__ import annotations

from typing import Protocol

from olp.errors import OLPError
from olp.ir import ChatRequest, ChatResponse, Event

__all__ = ["Dialect", "StreamEncoder"]


class StreamEncoder(Protocol):
    """Turns one answer's events into Server-Sent-Events frames (one encoder per answer)."""

    def start(self) -> bytes:
        """Frames sent right after the response headers, before any event (may be b"")."""
        ...

    def encode(self, event: Event) -> bytes:
        """Zero or more complete SSE frames for one event (b"" when nothing is sent)."""
        ...

    def done(self) -> bytes:
        """The closing frames of a complete answer."""
        ...

    def error_frame(self, err: OLPError) -> bytes:
        """The last frames of a stream that failed after its headers went out."""
        ...

    def keepalive(self) -> bytes:
        """A heartbeat that keeps the line open while no content is ready (not content)."""
        ...


class Dialect(Protocol):
    """One client-facing wire: its request parser and its answer writers."""

    name: str

    def parse(self, body: bytes) -> ChatRequest:
        """The request; raises `olp.errors.InvalidRequest` naming the field at fault."""
        ...

    def response_body(
        self, response: ChatResponse, request: ChatRequest, response_id: str, created: int
    ) -> bytes:
        """A non-streaming answer's JSON body."""
        ...

    def stream_encoder(self, request: ChatRequest, response_id: str, created: int) -> StreamEncoder:
        """A fresh encoder for one streamed answer."""
        ...

    def error_body(self, err: OLPError) -> bytes:
        """The wire's JSON error body (the status is `err.http_status`)."""
        ...

    def response_id(self, request_id: str) -> str:
        """The answer's id in this wire's style, derived from OLP's request id."""
        ...
