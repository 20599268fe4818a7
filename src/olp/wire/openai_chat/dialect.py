"""The OpenAI Chat Completions wire as a `Dialect` (what `/v1/chat/completions` speaks)."""

from __future__ import annotations

from olp.errors import OLPError
from olp.ir import ChatRequest, ChatResponse
from olp.wire.openai_chat.encode import ChunkEncoder, completion_body, error_body
from olp.wire.openai_chat.parse import WIRE, parse_chat_request

__all__ = ["OpenAIChat"]


class OpenAIChat:
    """Chat Completions: `chat.completion` objects, `chat.completion.chunk` SSE, OpenAI errors."""

    name = WIRE

    def parse(self, body: bytes) -> ChatRequest:
        return parse_chat_request(body)

    def response_body(
        self, response: ChatResponse, request: ChatRequest, response_id: str, created: int
    ) -> bytes:
        return completion_body(response, response_id, request.model, created)

    def stream_encoder(self, request: ChatRequest, response_id: str, created: int) -> ChunkEncoder:
        return ChunkEncoder(response_id, request.model, created, request.include_usage)

    def error_body(self, err: OLPError) -> bytes:
        return error_body(err)

    def response_id(self, request_id: str) -> str:
        return "chatcmpl-" + request_id.removeprefix("req_")
