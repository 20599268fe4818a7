"""The Responses wire as one `Dialect`: what the exchange handler needs of it."""

from __future__ import annotations

from olp.errors import OLPError
from olp.ir import ChatRequest, ChatResponse
from olp.wire.openai_chat import error_body
from olp.wire.openai_responses.encode import ResponseStreamEncoder, response_body
from olp.wire.openai_responses.parse import parse_responses_request

__all__ = ["OpenAIResponses"]


class OpenAIResponses:
    """Errors keep OpenAI's shape, the same as on the chat route."""

    name = "openai_responses"

    def parse(self, body: bytes) -> ChatRequest:
        return parse_responses_request(body)

    def response_body(
        self, response: ChatResponse, request: ChatRequest, response_id: str, created: int
    ) -> bytes:
        return response_body(response, request, response_id, created)

    def stream_encoder(
        self, request: ChatRequest, response_id: str, created: int
    ) -> ResponseStreamEncoder:
        return ResponseStreamEncoder(request, response_id, created)

    def error_body(self, err: OLPError) -> bytes:
        return error_body(err)

    def response_id(self, request_id: str) -> str:
        return "resp_" + request_id.removeprefix("req_")
