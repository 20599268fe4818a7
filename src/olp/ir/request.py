"""A chat request as OLP understands it, independent of any wire format.

Frozen, slotted dataclasses: cheap to build, safe to share between hops and
singleflight followers. Validation of untrusted input happens in `olp.wire`, never here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

__all__ = [
    "CacheControl",
    "ChatRequest",
    "ContentPart",
    "Forward",
    "ImagePart",
    "JSONValue",
    "Message",
    "NamedToolChoice",
    "Passthrough",
    "ReasoningPart",
    "ResponseFormat",
    "Role",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "json_default",
]

JSONValue = Any
Role = Literal["system", "developer", "user", "assistant", "tool"]


# A prompt-caching breakpoint a client set on a part, message or tool, as it wrote it
# (`{"type": "ephemeral", "ttl"?: …}`): upstreams with prompt caching honour it, others
# ignore it.
CacheControl = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    cache_control: CacheControl | None = None


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image by URL; `url` may be a `data:` URL carrying the bytes inline."""

    url: str
    detail: Literal["auto", "low", "high"] | None = None
    cache_control: CacheControl | None = None


ContentPart = TextPart | ImagePart


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call the assistant made. `arguments` is the JSON text, as models emit it."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ReasoningPart:
    """A block of an assistant's earlier thinking, sent back as the upstream sealed it
    (see `ReasoningDelta`): `text` with its `signature`, or `encrypted` alone."""

    text: str
    signature: str | None = None
    encrypted: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    # Text-only content keeps its plain string form; mixed content is a tuple of parts.
    content: str | tuple[ContentPart, ...] | None
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    # An assistant's thinking before its content, when the client sent it back.
    reasoning: tuple[ReasoningPart, ...] = ()
    # A tool result that reports the tool's failure.
    is_error: bool = False
    # A breakpoint at the end of this message (its last block).
    cache_control: CacheControl | None = None

    def text(self) -> str:
        """The message's text parts joined; images are left out."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str | None = None
    parameters: Mapping[str, JSONValue] | None = None
    strict: bool | None = None
    cache_control: CacheControl | None = None


@dataclass(frozen=True, slots=True)
class NamedToolChoice:
    name: str


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    type: Literal["text", "json_object", "json_schema"]
    # For json_schema: {"name", "schema", "strict"?, "description"?} as the client sent it.
    json_schema: Mapping[str, JSONValue] | None = None


@dataclass(frozen=True, slots=True)
class Passthrough:
    """What a client's wire said that the IR does not model, kept for an upstream that
    speaks the same wire: top-level body fields and request headers, as sent.

    Only a provider whose API is that wire (`wire` names it, as `Dialect.name` does) reads
    it; every other provider ignores it, and documents which fields it loses.
    """

    wire: str
    fields: Mapping[str, JSONValue] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Forward:
    """A request for an endpoint OLP routes but does not translate (`/v1/embeddings`,
    `/v1/completions`): its body goes to a provider that serves that endpoint as it came,
    with only the hop's model put in, and the answer comes back as `RawBody` events."""

    endpoint: Literal["embeddings", "completions"]
    body: Mapping[str, JSONValue]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    stream: bool = False
    include_usage: bool = False
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    # Which name the client used; some OpenAI models accept only max_completion_tokens.
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    stop: tuple[str, ...] = ()
    seed: int | None = None
    user: str | None = None
    # Sampling and output options OLP does not interpret (frequency_penalty, logit_bias,
    # reasoning_effort, ...). OpenAI-compatible providers forward them; others drop them.
    extra: Mapping[str, JSONValue] = field(default_factory=dict)
    passthrough: Passthrough | None = None
    # Set for a forwarded endpoint (then `messages` is empty): see `Forward`.
    forward: Forward | None = None

    def with_model(self, model: str) -> ChatRequest:
        # Most chains send the requested model name on, and `replace` rebuilds every field
        # of this frozen request: skip it when nothing changes.
        return self if model == self.model else replace(self, model=model)


def json_default(value: object) -> Any:
    """orjson's `default` for IR data: its Mappings (schemas, extras) encode as objects.

    They are Mappings by type and not always dicts, which is all orjson takes natively.
    """
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
