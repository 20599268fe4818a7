"""The OpenAI Responses wire (`POST /v1/responses`): request bodies in, responses and SSE out."""

from __future__ import annotations

from olp.wire.openai_responses.dialect import OpenAIResponses
from olp.wire.openai_responses.encode import ResponseStreamEncoder, response_body
from olp.wire.openai_responses.parse import parse_responses_request

__all__ = ["OpenAIResponses", "ResponseStreamEncoder", "parse_responses_request", "response_body"]
