"""The OpenAI Chat Completions wire: request bodies in, completions and SSE chunks out."""

from __future__ import annotations

from olp.wire.openai_chat.dialect import OpenAIChat
from olp.wire.openai_chat.encode import ChunkEncoder, completion_body, error_body, usage_dict
from olp.wire.openai_chat.parse import parse_chat_request

__all__ = [
    "ChunkEncoder",
    "OpenAIChat",
    "completion_body",
    "error_body",
    "parse_chat_request",
    "usage_dict",
]
