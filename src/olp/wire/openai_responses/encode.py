"""IR -> the Responses API's JSON: a whole `response` object, or its stream of SSE events.

The shapes are what the openai SDK's `Response` and `ResponseStreamEvent` models accept, and
what Codex reads. An answer's output is a list of items in the order the model produced
them: a `reasoning` item (its text as one summary), a `message` item (one `output_text`
part), and one `function_call` item per tool call.

A stream opens with `response.created` and `response.in_progress`; each item is announced
(`response.output_item.added`), filled by deltas, and closed (`…done` events, then
`response.output_item.done`) when the next item begins or the answer ends; it closes with
`response.completed` (or `response.incomplete` for a truncated answer) carrying the whole
response and its usage. A failure after the start is a `response.failed` event naming the
error. Every event carries its `sequence_number`, counting from 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from olp.errors import OLPError
from olp.ir import (
    ChatRequest,
    ChatResponse,
    Event,
    Finish,
    FinishReason,
    NamedToolChoice,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from olp.wire._json import dumps

__all__ = ["ResponseStreamEncoder", "response_body", "response_object", "usage_object"]

_KEEPALIVE = b": keepalive\n\n"
_INCOMPLETE: Mapping[FinishReason, str] = {
    "length": "max_output_tokens",
    "content_filter": "content_filter",
}
ItemKind = Literal["reasoning", "message", "function_call"]
_PREFIX: Mapping[ItemKind, str] = {"reasoning": "rs", "message": "msg", "function_call": "fc"}


def usage_object(usage: Usage | None) -> dict[str, Any]:
    usage = usage or Usage()
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_prompt_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def response_object(
    request: ChatRequest,
    response_id: str,
    created: int,
    output: list[dict[str, Any]],
    finish: FinishReason | None,
    usage: Usage | None,
    error: OLPError | None = None,
) -> dict[str, Any]:
    """The `response` object; `finish` None: still in progress (or failed, with `error`)."""
    status, incomplete = _status(finish, error)
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None if error is None else _error(error),
        "incomplete_details": incomplete,
        "instructions": None,
        "max_output_tokens": request.max_tokens,
        "model": request.model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": None,
        "reasoning": {"effort": request.extra.get("reasoning_effort"), "summary": None},
        "store": False,
        "temperature": request.temperature,
        "text": {"format": _format(request)},
        "tool_choice": _tool_choice(request),
        "tools": [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": tool.strict,
            }
            for tool in request.tools
        ],
        "top_p": request.top_p,
        "truncation": "disabled",
        "usage": None if finish is None and error is None else usage_object(usage),
        "metadata": request.extra.get("metadata") or {},
    }


def response_body(
    response: ChatResponse, request: ChatRequest, response_id: str, created: int
) -> bytes:
    """A non-streaming answer as one `response` object."""
    suffix = _suffix(response_id)
    output: list[dict[str, Any]] = []
    if response.reasoning is not None:
        output.append(_reasoning_item(_item_id("reasoning", suffix, 0), response.reasoning))
    if response.text is not None or not response.tool_calls:
        output.append(_message_item(_item_id("message", suffix, len(output)), response.text or ""))
    for index, call in enumerate(response.tool_calls):
        item_id = _item_id("function_call", suffix, len(output))
        output.append(_call_item(item_id, call.id or _call_id(response_id, index), call))
    body = response_object(
        request, response_id, created, output, response.finish_reason, response.usage
    )
    return dumps(body)


@dataclass(slots=True)
class _Item:
    """One output item being streamed."""

    kind: ItemKind
    index: int  # its place in the response's output
    id: str
    parts: list[str] = field(default_factory=list)  # text, summary or arguments so far
    call_id: str = ""
    name: str = ""

    def text(self) -> str:
        return "".join(self.parts)


class ResponseStreamEncoder:
    """Turns one answer's IR events into Responses SSE events. One per response."""

    __slots__ = (
        "_calls",
        "_created",
        "_finish",
        "_open",
        "_output",
        "_request",
        "_response_id",
        "_sequence",
        "_suffix",
        "_usage",
    )

    def __init__(self, request: ChatRequest, response_id: str, created: int) -> None:
        self._request = request
        self._response_id = response_id
        self._suffix = _suffix(response_id)
        self._created = created
        self._sequence = 0
        self._output: list[dict[str, Any]] = []  # the closed items, in order
        self._open: list[_Item] = []  # text or reasoning: one; tool calls: one or more
        self._calls: dict[int, _Item] = {}  # by the IR's tool-call index
        self._usage: Usage | None = None
        self._finish: FinishReason | None = None

    def start(self) -> bytes:
        response = self._response(None)
        return self._event("response.created", {"response": response}) + self._event(
            "response.in_progress", {"response": response}
        )

    def encode(self, event: Event) -> bytes:
        if isinstance(event, TextDelta):
            return self._text(event.text) if event.text else b""
        if isinstance(event, ToolCallDelta):
            return self._tool_call(event)
        if isinstance(event, ReasoningDelta):
            return self._reasoning(event.text) if event.text else b""
        if isinstance(event, Finish):
            self._finish = event.reason
        elif isinstance(event, Usage):
            self._usage = event
        return b""  # (RawBody: only forwarded endpoints' answers carry it)

    def done(self) -> bytes:
        frames = self._close_all()
        if not self._output:
            # An answer with no content is still one (empty) message.
            item = self._begin("message")
            frames += self._open_message(item) + self._close_all()
        finish = self._finish or ("tool_calls" if self._calls else "stop")
        kind = "response.incomplete" if finish in _INCOMPLETE else "response.completed"
        return frames + self._event(kind, {"response": self._response(finish)})

    def error_frame(self, err: OLPError) -> bytes:
        frames = self._close_all()
        response = self._response(None, err)
        return frames + self._event("response.failed", {"response": response})

    def keepalive(self) -> bytes:
        return _KEEPALIVE

    def _response(self, finish: FinishReason | None, error: OLPError | None = None) -> Any:
        return response_object(
            self._request,
            self._response_id,
            self._created,
            list(self._output),
            finish,
            self._usage,
            error,
        )

    def _text(self, text: str) -> bytes:
        frames = b""
        item = self._current("message")
        if item is None:
            frames = self._close_all()
            item = self._begin("message")
            frames += self._open_message(item)
        item.parts.append(text)
        return frames + self._event(
            "response.output_text.delta",
            {**_at(item), "content_index": 0, "delta": text, "logprobs": []},
        )

    def _reasoning(self, text: str) -> bytes:
        frames = b""
        item = self._current("reasoning")
        if item is None:
            frames = self._close_all()
            item = self._begin("reasoning")
            added = {"id": item.id, "type": "reasoning", "summary": [], "status": "in_progress"}
            frames += self._added(item, added) + self._event(
                "response.reasoning_summary_part.added",
                {**_at(item), "summary_index": 0, "part": {"type": "summary_text", "text": ""}},
            )
        item.parts.append(text)
        return frames + self._event(
            "response.reasoning_summary_text.delta",
            {**_at(item), "summary_index": 0, "delta": text},
        )

    def _tool_call(self, event: ToolCallDelta) -> bytes:
        frames = b""
        item = self._calls.get(event.index)
        if item is None:
            if self._current("function_call") is None:
                frames = self._close_all()
            item = self._begin("function_call")
            item.call_id = event.id or _call_id(self._response_id, event.index)
            item.name = event.name or ""
            self._calls[event.index] = item
            added = _call_item(item.id, item.call_id, ToolCall(item.call_id, item.name, ""))
            frames += self._added(item, {**added, "status": "in_progress"})
        elif event.name:
            item.name += event.name
        if not event.arguments:
            return frames
        item.parts.append(event.arguments)
        return frames + self._event(
            "response.function_call_arguments.delta", {**_at(item), "delta": event.arguments}
        )

    def _current(self, kind: ItemKind) -> _Item | None:
        return self._open[-1] if self._open and self._open[-1].kind == kind else None

    def _begin(self, kind: ItemKind) -> _Item:
        index = len(self._output) + len(self._open)
        item = _Item(kind, index, _item_id(kind, self._suffix, index))
        self._open.append(item)
        return item

    def _open_message(self, item: _Item) -> bytes:
        added = {
            "id": item.id,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return self._added(item, added) + self._event(
            "response.content_part.added", {**_at(item), "content_index": 0, "part": part}
        )

    def _added(self, item: _Item, body: dict[str, Any]) -> bytes:
        return self._event("response.output_item.added", {"output_index": item.index, "item": body})

    def _close_all(self) -> bytes:
        frames = b"".join(self._close(item) for item in self._open)
        self._open.clear()
        return frames

    def _close(self, item: _Item) -> bytes:
        text = item.text()
        if item.kind == "message":
            done = _message_item(item.id, text)
            part = done["content"][0]
            frames = self._event(
                "response.output_text.done",
                {**_at(item), "content_index": 0, "text": text, "logprobs": []},
            ) + self._event(
                "response.content_part.done", {**_at(item), "content_index": 0, "part": part}
            )
        elif item.kind == "reasoning":
            done = _reasoning_item(item.id, text)
            frames = self._event(
                "response.reasoning_summary_text.done",
                {**_at(item), "summary_index": 0, "text": text},
            ) + self._event(
                "response.reasoning_summary_part.done",
                {**_at(item), "summary_index": 0, "part": done["summary"][0]},
            )
        else:
            done = _call_item(item.id, item.call_id, ToolCall(item.call_id, item.name, text))
            frames = self._event(
                "response.function_call_arguments.done",
                {**_at(item), "name": item.name, "arguments": text},
            )
        self._output.append(done)
        return frames + self._event(
            "response.output_item.done", {"output_index": item.index, "item": done}
        )

    def _event(self, kind: str, body: dict[str, Any]) -> bytes:
        data = dumps({"type": kind, "sequence_number": self._sequence, **body})
        self._sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def _at(item: _Item) -> dict[str, Any]:
    return {"item_id": item.id, "output_index": item.index}


def _message_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
        "status": "completed",
    }


def _call_item(item_id: str, call_id: str, call: ToolCall) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": call.name,
        "arguments": call.arguments,
        "status": "completed",
    }


def _error(err: OLPError) -> dict[str, str]:
    """A failed response's error: its `code` is one of the few the Responses API defines
    (clients such as Codex retry a `rate_limit_exceeded`), the message names OLP's own."""
    code = "rate_limit_exceeded" if err.http_status == 429 else "server_error"
    return {"code": code, "message": f"{err.message} ({err.code})"}


def _status(
    finish: FinishReason | None, error: OLPError | None
) -> tuple[str, dict[str, str] | None]:
    if error is not None:
        return "failed", None
    if finish is None:
        return "in_progress", None
    reason = _INCOMPLETE.get(finish)
    return ("completed", None) if reason is None else ("incomplete", {"reason": reason})


def _format(request: ChatRequest) -> dict[str, Any]:
    fmt = request.response_format
    if fmt is None:
        return {"type": "text"}
    if fmt.type == "json_schema" and fmt.json_schema is not None:
        return {"type": "json_schema", **fmt.json_schema}
    return {"type": fmt.type}


def _tool_choice(request: ChatRequest) -> Any:
    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice):
        return {"type": "function", "name": choice.name}
    return choice or "auto"


def _suffix(response_id: str) -> str:
    return response_id.removeprefix("resp_")


def _item_id(kind: ItemKind, suffix: str, index: int) -> str:
    return f"{_PREFIX[kind]}_{suffix}{index:02d}"


def _call_id(response_id: str, index: int) -> str:
    digest = hashlib.sha256(f"{response_id}\0{index}".encode("utf-8", "surrogatepass"))
    return "call_" + digest.hexdigest()[:24]
