"""Fold a stream of events into one complete answer (for non-streaming clients)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from olp.ir.events import (
    Event,
    Finish,
    FinishReason,
    RawBody,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from olp.ir.request import ReasoningPart, ToolCall

__all__ = ["ChatResponse", "ResponseBuilder"]


@dataclass(frozen=True, slots=True)
class ChatResponse:
    text: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    usage: Usage | None
    # The thinking as blocks, with their seals (see `ReasoningDelta`); `reasoning` is its text.
    reasoning_parts: tuple[ReasoningPart, ...] = ()
    stop_sequence: str | None = None
    # A forwarded endpoint's answer, as the upstream sent it (see `RawBody`).
    raw: bytes | None = None


@dataclass(slots=True)
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ResponseBuilder:
    """Accumulates events; `build()` gives the answer so far."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, _PendingCall] = field(default_factory=dict)
    finish: FinishReason | None = None
    stop_sequence: str | None = None
    usage: Usage | None = None
    # Finished thinking blocks, and the pieces of the open one.
    blocks: list[ReasoningPart] = field(default_factory=list)
    open_block: list[str] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)

    def add(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, ToolCallDelta):
            call = self.calls.setdefault(event.index, _PendingCall())
            if event.id:
                call.id = event.id
            if event.name:
                call.name += event.name
            call.arguments.append(event.arguments)
        elif isinstance(event, ReasoningDelta):
            self._reasoning(event)
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Finish):
            self.finish = event.reason
            self.stop_sequence = event.stop_sequence
        elif isinstance(event, RawBody):
            self.raw.append(event.data)

    def _reasoning(self, event: ReasoningDelta) -> None:
        if event.text:
            self.reasoning.append(event.text)
            self.open_block.append(event.text)
        if event.encrypted is not None:
            self._close_block()
            self.blocks.append(ReasoningPart("", encrypted=event.encrypted))
        elif event.signature is not None:
            self.blocks.append(ReasoningPart("".join(self.open_block), event.signature))
            self.open_block.clear()

    def _close_block(self) -> None:
        if self.open_block:
            self.blocks.append(ReasoningPart("".join(self.open_block)))
            self.open_block.clear()

    def extend(self, events: Iterable[Event]) -> ResponseBuilder:
        for event in events:
            self.add(event)
        return self

    def build(self) -> ChatResponse:
        calls = tuple(
            ToolCall(id=c.id, name=c.name, arguments="".join(c.arguments))
            for _, c in sorted(self.calls.items())
        )
        finish = self.finish or ("tool_calls" if calls else "stop")
        blocks = list(self.blocks)
        if self.open_block:  # thinking without a seal
            blocks.append(ReasoningPart("".join(self.open_block)))
        return ChatResponse(
            text="".join(self.text) if self.text else None,
            reasoning="".join(self.reasoning) if self.reasoning else None,
            tool_calls=calls,
            finish_reason=finish,
            usage=self.usage,
            reasoning_parts=tuple(blocks),
            stop_sequence=self.stop_sequence,
            raw=b"".join(self.raw) if self.raw else None,
        )
