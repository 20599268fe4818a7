"""IR events <-> the compact bytes a cache entry is stored as.

One JSON array per event, tagged by type (`["t", "Hel"]`), so a hit replays exactly the
chunks the upstream produced. The whole entry is `[CODEC_VERSION, event, event, ...]`,
encoded with one orjson call (one call per event costs several times more: each call
allocates its own output buffer); an entry written by another codec version decodes as
None (a miss), never as wrong data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from olp.ir import Event, Finish, RawBody, ReasoningDelta, TextDelta, ToolCallDelta, Usage

__all__ = ["CODEC_VERSION", "decode_events", "encode_events", "estimate_size"]

# Bump when an event type gains, loses or reorders a field (tests/cache pins the fields).
CODEC_VERSION = 3
_TEXTS = (TextDelta, ReasoningDelta)  # (ReasoningDelta is sized apart: its seals)


def encode_events(events: Iterable[Event]) -> bytes:
    """An entry body; raises TypeError for anything that is not an IR event."""
    items: list[Any] = [CODEC_VERSION]
    for event in events:
        if type(event) is TextDelta:  # by far the most common: no call for it
            items.append(("t", event.text))
            continue
        item = _ITEMS.get(type(event))
        if item is None:
            raise TypeError(f"not an IR event: {type(event).__name__}")
        items.append(item(event))
    return orjson.dumps(items)


def _usage(event: Usage) -> tuple[Any, ...]:
    return (
        "u",
        event.prompt_tokens,
        event.completion_tokens,
        event.cached_prompt_tokens,
        event.cache_write_tokens,
        event.reasoning_tokens,
        event.cost_usd,
    )


# The other event types by exact type (the IR event classes have no subclasses): one dict
# lookup per event. (orjson could write the dataclasses itself, but its dataclass path
# costs about twice this.)
def _reasoning(event: ReasoningDelta) -> tuple[Any, ...]:
    if event.signature is None and event.encrypted is None:
        return ("r", event.text)
    return ("r", event.text, event.signature, event.encrypted)


def _finish(event: Finish) -> tuple[Any, ...]:
    if event.stop_sequence is None:
        return ("f", event.reason)
    return ("f", event.reason, event.stop_sequence)


_ITEMS: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    ReasoningDelta: _reasoning,
    ToolCallDelta: lambda e: ("c", e.index, e.id, e.name, e.arguments),
    Usage: _usage,
    Finish: _finish,
    # Bytes as latin-1 text: one character per byte, so any bytes survive the round trip.
    RawBody: lambda e: ("b", e.data.decode("latin-1")),
}


def estimate_size(event: Event) -> int:
    """About how many bytes `event` adds to an entry, without encoding it (for streaming).

    Exact for ASCII text without escapes; the exact size is checked when the entry is
    written.
    """
    if isinstance(event, ReasoningDelta):
        return len(event.text) + len(event.signature or "") + len(event.encrypted or "") + 8
    if isinstance(event, _TEXTS):
        return len(event.text) + 8
    if isinstance(event, ToolCallDelta):
        return len(event.arguments) + len(event.id or "") + len(event.name or "") + 24
    if isinstance(event, RawBody):
        return len(event.data) + 8
    return 48  # a usage, a finish: a few numbers or a short word


def decode_events(body: bytes) -> tuple[Event, ...] | None:
    """The events of an entry body, or None when it is not this codec's (treat as a miss)."""
    try:
        items = orjson.loads(body)
        if type(items) is not list or not items or items[0] != CODEC_VERSION:
            return None
        return tuple(_decode(item) for item in items[1:])
    except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, IndexError):
        return None


def _decode(item: list[Any]) -> Event:
    tag = item[0]
    if tag == "t":
        return TextDelta(item[1])
    if tag == "r":
        return ReasoningDelta(*item[1:4])
    if tag == "c":
        return ToolCallDelta(item[1], item[2], item[3], item[4])
    if tag == "u":
        return Usage(item[1], item[2], item[3], item[4], item[5], item[6])
    if tag == "f":
        return Finish(*item[1:3])
    if tag == "b":
        return RawBody(item[1].encode("latin-1"))
    raise ValueError(f"unknown event tag {tag!r}")
