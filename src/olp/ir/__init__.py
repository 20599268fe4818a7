"""The intermediate representation: pure data, no I/O."""

from __future__ import annotations

from olp.ir.events import (
    CONTENT_EVENTS,
    Event,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    is_content,
)
from olp.ir.request import (
    CacheControl,
    ChatRequest,
    ContentPart,
    ImagePart,
    JSONValue,
    Message,
    NamedToolChoice,
    Passthrough,
    ReasoningPart,
    ResponseFormat,
    Role,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    json_default,
)
from olp.ir.response import ChatResponse, ResponseBuilder

__all__ = [
    "CONTENT_EVENTS",
    "CacheControl",
    "ChatRequest",
    "ChatResponse",
    "ContentPart",
    "Event",
    "Finish",
    "FinishReason",
    "ImagePart",
    "JSONValue",
    "Message",
    "NamedToolChoice",
    "Passthrough",
    "ReasoningDelta",
    "ReasoningPart",
    "ResponseBuilder",
    "ResponseFormat",
    "Role",
    "TextDelta",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "Usage",
    "is_content",
    "json_default",
]
