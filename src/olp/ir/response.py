"""Fold a stream of events into one complete answer (for non-streaming clients)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from olp.ir.events import (
    Event,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from olp.ir.request import ToolCall

__all__ = ["ChatResponse", "ResponseBuilder"]


@dataclass(frozen=True, slots=True)
class ChatResponse:
    text: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    usage: Usage | None


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
    usage: Usage | None = None

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
            self.reasoning.append(event.text)
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Finish):
            self.finish = event.reason

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
        return ChatResponse(
            text="".join(self.text) if self.text else None,
            reasoning="".join(self.reasoning) if self.reasoning else None,
            tool_calls=calls,
            finish_reason=finish,
            usage=self.usage,
        )
