"""The Anthropic Messages wire: request bodies in, messages and their SSE events out."""

from __future__ import annotations

from olp.wire.anthropic_messages.count import estimate_input_tokens
from olp.wire.anthropic_messages.dialect import AnthropicMessages
from olp.wire.anthropic_messages.encode import (
    MessageStreamEncoder,
    error_body,
    message_body,
    stop_reason,
)
from olp.wire.anthropic_messages.parse import WIRE, parse_messages_request

__all__ = [
    "WIRE",
    "AnthropicMessages",
    "MessageStreamEncoder",
    "error_body",
    "estimate_input_tokens",
    "message_body",
    "parse_messages_request",
    "stop_reason",
]
