"""Anthropic Messages API answers (streamed or whole) → IR events. Pure: no I/O.

As with every OLP provider, `Finish` is the last event and `Usage` comes just before it.
Tool-call indexes count `tool_use` blocks only (0, 1, 2 …), whatever their position among
text and thinking blocks, because that is what OpenAI-shaped clients index by.
"""

from __future__ import annotations

from typing import Any

import orjson

from olp.errors import Failure, ProviderError
from olp.ir import (
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
)
from olp.providers._anthropic_messages import finish_reason, usage_from
from olp.providers._http_errors import error_from_payload
from olp.providers._lenient import json_text, obj, text
from olp.wire.sse import SSEMessage

__all__ = ["StreamParser", "events_from_response", "finish_reason", "usage_from"]

_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def events_from_response(provider: str, doc: Any) -> list[Event]:
    """A complete (non-streaming) message as events."""
    if not isinstance(doc, dict):
        raise _malformed(provider, "answer is not a JSON object")
    if doc.get("type") == "error" or "error" in doc:
        raise error_from_payload(provider, doc.get("error"))
    content = doc.get("content")
    if not isinstance(content, list):
        raise _malformed(provider, "answer has no content list")
    events: list[Event] = []
    tools = 0
    for block in content:
        if not isinstance(block, dict):
            raise _malformed(provider, f"content block is not an object: {str(block)[:120]!r}")
        kind = block.get("type")
        if kind == "text" and (said := text(block.get("text"))):
            events.append(TextDelta(said))
        elif kind in ("thinking", "redacted_thinking"):
            events.extend(_thinking(block))
        elif kind == "tool_use":
            arguments = json_text(block.get("input"))
            call_id, name = text(block.get("id")), text(block.get("name"))
            events.append(ToolCallDelta(tools, call_id, name, arguments))
            tools += 1
    usage = doc.get("usage")
    if isinstance(usage, dict):
        events.append(usage_from(usage))
    reason = finish_reason(doc.get("stop_reason"), tools > 0)
    events.append(Finish(reason, _stop_sequence(doc.get("stop_sequence"))))
    return events


def _thinking(block: dict[str, Any]) -> list[Event]:
    """A whole thinking block: its text and seal, or a redacted block's data."""
    if block.get("type") == "redacted_thinking":
        data = text(block.get("data"))
        return [ReasoningDelta("", encrypted=data)] if data else []
    thought, signature = text(block.get("thinking")), text(block.get("signature"))
    if not thought and not signature:
        return []
    return [ReasoningDelta(thought or "", signature or None)]


def _stop_sequence(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class StreamParser:
    """Messages API SSE messages → events. `done` once `message_stop` arrived."""

    __slots__ = ("_block_tool", "_no_args", "_provider", "_sequence", "_stop", "_usage", "done")

    def __init__(self, provider: str) -> None:
        self._provider = provider
        # Content-block index → tool-call index, for tool_use blocks only.
        self._block_tool: dict[int, int] = {}
        # Tool calls that have not had an arguments piece yet.
        self._no_args: set[int] = set()
        self._usage: dict[str, Any] = {}
        self._stop: object = None
        self._sequence: str | None = None
        self.done = False

    def feed_message(self, message: SSEMessage) -> list[Event]:
        return self.feed(message.event, message.data)

    def feed(self, event: str | None, data: str) -> list[Event]:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise _malformed(self._provider, f"{exc} in {data[:120]!r}") from exc
        if not isinstance(doc, dict):
            raise _malformed(self._provider, f"event is not an object: {data[:120]!r}")
        # The data's own `type` names the event; the SSE `event:` line is a duplicate.
        kind = doc.get("type") or event
        if kind == "content_block_delta":
            return self._delta(doc)
        if kind == "content_block_start":
            return self._start(doc)
        if kind == "content_block_stop":
            return self._stop_block(doc)
        if kind == "message_start":
            self._merge_usage(obj(doc.get("message")).get("usage"))
        elif kind == "message_delta":
            delta = obj(doc.get("delta"))
            self._stop = delta.get("stop_reason") or self._stop
            self._sequence = _stop_sequence(delta.get("stop_sequence")) or self._sequence
            self._merge_usage(doc.get("usage"))
        elif kind == "message_stop":
            return self.end()
        elif kind == "error":
            raise error_from_payload(self._provider, doc.get("error"))
        return []  # ping, and event types added after this was written

    def end(self) -> list[Event]:
        self.done = True
        reason = finish_reason(self._stop, bool(self._block_tool))
        finish = Finish(reason, self._sequence if reason == "stop" else None)
        if not self._usage:
            return [finish]
        return [usage_from(self._usage), finish]

    def _merge_usage(self, raw: Any) -> None:
        # message_delta repeats some counters cumulatively; the latest value wins.
        if isinstance(raw, dict):
            for key in _USAGE_KEYS:
                value = raw.get(key)
                if value is not None:
                    self._usage[key] = value

    def _start(self, doc: dict[str, Any]) -> list[Event]:
        block = obj(doc.get("content_block"))
        kind = block.get("type")
        if kind == "tool_use":
            tool = len(self._block_tool)
            self._block_tool[_index(doc, tool)] = tool
            self._no_args.add(tool)
            return [ToolCallDelta(tool, text(block.get("id")), text(block.get("name")), "")]
        if kind == "text" and (said := text(block.get("text"))):
            return [TextDelta(said)]
        if kind == "thinking" and (thought := text(block.get("thinking"))):
            return [ReasoningDelta(thought)]
        if kind == "redacted_thinking":
            return _thinking(block)
        return []

    def _delta(self, doc: dict[str, Any]) -> list[Event]:
        delta = obj(doc.get("delta"))
        kind = delta.get("type")
        if kind == "text_delta":
            said = text(delta.get("text"))
            return [TextDelta(said)] if said else []
        if kind == "input_json_delta":
            piece = text(delta.get("partial_json"))
            tool = self._block_tool.get(_index(doc, -1))
            if not piece or tool is None:
                return []
            self._no_args.discard(tool)
            return [ToolCallDelta(tool, arguments=piece)]
        if kind == "thinking_delta":
            thinking = text(delta.get("thinking"))
            return [ReasoningDelta(thinking)] if thinking else []
        if kind == "signature_delta":
            # The seal of the thinking block so far: an Anthropic client sends it back.
            signature = text(delta.get("signature"))
            return [ReasoningDelta("", signature)] if signature else []
        return []  # citations_delta: nothing the IR carries

    def _stop_block(self, doc: dict[str, Any]) -> list[Event]:
        tool = self._block_tool.get(_index(doc, -1))
        if tool is not None and tool in self._no_args:
            # A call without parameters streams no JSON at all; clients expect an object.
            self._no_args.discard(tool)
            return [ToolCallDelta(tool, arguments="{}")]
        return []


def _index(doc: dict[str, Any], default: int) -> int:
    """A content block's `index` (an integer; anything else is as good as absent)."""
    index = doc.get("index", default)
    return index if isinstance(index, int) and not isinstance(index, bool) else default


def _malformed(provider: str, detail: str) -> ProviderError:
    return ProviderError(
        Failure.UPSTREAM_ERROR, f"malformed response from upstream: {detail}", provider=provider
    )
