"""IR -> Anthropic Messages JSON: whole messages, the SSE event sequence, errors.

Shaped as api.anthropic.com sends them, so the `anthropic` SDK (`messages.create`,
`messages.stream` and its accumulated `get_final_message`) and Claude Code read them
unchanged:
- a stream is `message_start`, then per content block `content_block_start`, its deltas
  (`text_delta`, `thinking_delta`, `signature_delta`, `input_json_delta`) and
  `content_block_stop`, then `message_delta` (stop reason, final usage), `message_stop`;
  `ping` is the keepalive and `event: error` a failure after the stream began;
- a tool call without an id from its provider gets a deterministic one (`toolu_` + 24
  hex digits from the message id and the call's index);
- usage: `input_tokens` excludes the prompt-cache reads and writes, which are reported
  apart (the IR counts them in `prompt_tokens`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from olp.errors import OLPError
from olp.ir import (
    ChatRequest,
    ChatResponse,
    Event,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from olp.wire._json import dumps as _dumps

__all__ = ["MessageStreamEncoder", "error_body", "message_body", "stop_reason", "usage_dict"]

_STOP_REASONS: dict[FinishReason, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
# Anthropic's error types by HTTP status; OLP's statuses are kept as they are.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_PING = b'event: ping\ndata: {"type":"ping"}\n\n'


def stop_reason(reason: FinishReason, stop_sequence: str | None) -> str:
    if reason == "stop" and stop_sequence is not None:
        return "stop_sequence"
    return _STOP_REASONS.get(reason, "end_turn")


def usage_dict(usage: Usage | None) -> dict[str, Any]:
    u = usage or Usage()
    fresh = max(0, u.prompt_tokens - u.cached_prompt_tokens - u.cache_write_tokens)
    return {
        "input_tokens": fresh,
        "output_tokens": u.completion_tokens,
        "cache_read_input_tokens": u.cached_prompt_tokens,
        "cache_creation_input_tokens": u.cache_write_tokens,
    }


def error_body(err: OLPError) -> bytes:
    """`{"type": "error", "error": {"type", "message"}}`, the type chosen by status."""
    status = err.http_status
    default = "api_error" if status >= 500 else "invalid_request_error"
    error = {"type": _ERROR_TYPES.get(status, default), "message": str(err.message)}
    return _dumps({"type": "error", "error": error})


def message_body(response: ChatResponse, message_id: str, request: ChatRequest) -> bytes:
    """A non-streaming `message` object."""
    content: list[dict[str, Any]] = []
    for part in response.reasoning_parts:
        if part.encrypted is not None:
            content.append({"type": "redacted_thinking", "data": part.encrypted})
        else:
            content.append(
                {"type": "thinking", "thinking": part.text, "signature": part.signature or ""}
            )
    if response.text:
        content.append({"type": "text", "text": response.text})
    for index, call in enumerate(response.tool_calls):
        content.append(
            {
                "type": "tool_use",
                "id": call.id or _tool_id(message_id, index),
                "name": call.name,
                "input": _input(call.arguments),
            }
        )
    return _dumps(
        {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": request.model,
            "content": content,
            "stop_reason": stop_reason(response.finish_reason, response.stop_sequence),
            "stop_sequence": response.stop_sequence,
            "usage": usage_dict(response.usage),
        }
    )


class MessageStreamEncoder:
    """One answer's events as the Messages API's SSE events (one encoder per answer)."""

    __slots__ = ("_block", "_finish", "_index", "_message_id", "_model", "_usage")

    def __init__(self, message_id: str, model: str) -> None:
        self._message_id = message_id
        self._model = model
        # The open content block: "text", "thinking", ("tool", call index), or None.
        self._block: object = None
        self._index = -1  # the open (or last) block's index
        self._finish: Finish | None = None
        self._usage: Usage | None = None

    def start(self) -> bytes:
        message: dict[str, Any] = {
            "id": self._message_id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_dict(None),
        }
        return _event("message_start", {"type": "message_start", "message": message})

    def encode(self, event: Event) -> bytes:
        if isinstance(event, TextDelta):
            if not event.text:
                return b""
            opened = self._open("text", {"type": "text", "text": ""})
            return opened + self._delta({"type": "text_delta", "text": event.text})
        if isinstance(event, ToolCallDelta):
            return self._tool_call(event)
        if isinstance(event, ReasoningDelta):
            return self._reasoning(event)
        if isinstance(event, Finish):
            self._finish = event
            return self._close()
        if isinstance(event, Usage):
            self._usage = event
        return b""  # (RawBody: only forwarded endpoints' answers carry it)

    def done(self) -> bytes:
        finish = self._finish or Finish("stop")
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": stop_reason(finish.reason, finish.stop_sequence),
                "stop_sequence": finish.stop_sequence,
            },
            "usage": usage_dict(self._usage),
        }
        return (
            self._close()
            + _event("message_delta", delta)
            + _event("message_stop", {"type": "message_stop"})
        )

    def error_frame(self, err: OLPError) -> bytes:
        return b"event: error\ndata: " + error_body(err) + b"\n\n"

    def keepalive(self) -> bytes:
        return _PING

    def _reasoning(self, event: ReasoningDelta) -> bytes:
        if event.encrypted is not None:
            block = {"type": "redacted_thinking", "data": event.encrypted}
            return self._close() + self._open(("redacted", self._index + 1), block) + self._close()
        out = b""
        if event.text or event.signature is not None:
            out = self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        if event.text:
            out += self._delta({"type": "thinking_delta", "thinking": event.text})
        if event.signature is not None:
            # The seal comes last in its block: the next thinking starts a new one.
            out += self._delta({"type": "signature_delta", "signature": event.signature})
            out += self._close()
        return out

    def _tool_call(self, event: ToolCallDelta) -> bytes:
        key = ("tool", event.index)
        out = b""
        if self._block != key:
            block = {
                "type": "tool_use",
                "id": event.id or _tool_id(self._message_id, event.index),
                "name": event.name or "",
                "input": {},
            }
            out = self._open(key, block)
        if event.arguments:
            out += self._delta({"type": "input_json_delta", "partial_json": event.arguments})
        return out

    def _open(self, kind: object, block: dict[str, Any]) -> bytes:
        if self._block == kind:
            return b""
        closed = self._close()
        self._block = kind
        self._index += 1
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        return closed + _event("content_block_start", start)

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        self._block = None
        return _event("content_block_stop", {"type": "content_block_stop", "index": self._index})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        doc = {"type": "content_block_delta", "index": self._index, "delta": delta}
        return _event("content_block_delta", doc)


def _event(name: str, doc: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _dumps(doc) + b"\n\n"


def _input(arguments: str) -> Any:
    """A call's arguments as the object Anthropic clients expect; text that is not a JSON
    object (a model's broken output) is kept whole under `_raw` rather than lost."""
    try:
        value = orjson.loads(arguments) if arguments.strip() else {}
    except orjson.JSONDecodeError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def _tool_id(message_id: str, index: int) -> str:
    digest = hashlib.sha256(f"{message_id}\0{index}".encode("utf-8", "surrogatepass"))
    return "toolu_" + digest.hexdigest()[:24]
