"""What a provider yields while it answers: a stream of small, typed events.

Content events (text, reasoning, tool-call pieces) are what the first-chunk rule counts:
once one reached the client, the hop is committed (docs/design.md §5 rule 1). `Usage` and
`Finish` are bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CONTENT_EVENTS",
    "Event",
    "Finish",
    "FinishReason",
    "RawBody",
    "ReasoningDelta",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "is_content",
]

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Model thinking, when the upstream exposes it (sent as `reasoning_content`).

    Some upstreams seal each block of thinking so it can be sent back in a later turn:
    `signature` is that seal, and comes with the block's last piece (it ends the block);
    `encrypted` is a whole block whose text the upstream withholds. Clients of wires
    without these simply never see them.
    """

    text: str
    signature: str | None = None
    encrypted: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of the `index`-th tool call. `id` and `name` come with its first piece."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Of prompt_tokens: read from the upstream's prompt cache / written to it.
    cached_prompt_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    # The provider's own figure, when it reports one (e.g. a CLI's total_cost_usd).
    cost_usd: float | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason
    # For "stop": the client's stop sequence that ended the answer, when the upstream says.
    stop_sequence: str | None = None


@dataclass(frozen=True, slots=True)
class RawBody:
    """A piece of an upstream's answer passed on as it came, for the endpoints OLP forwards
    without reading (embeddings, legacy completions): the whole JSON body, or one SSE
    frame of a stream. Content: it commits the hop like text does."""

    data: bytes


Event = TextDelta | ReasoningDelta | ToolCallDelta | Usage | Finish | RawBody
CONTENT_EVENTS = (TextDelta, ReasoningDelta, ToolCallDelta, RawBody)


def is_content(event: Event) -> bool:
    return isinstance(event, CONTENT_EVENTS)
