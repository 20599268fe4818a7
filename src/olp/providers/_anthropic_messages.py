"""Anthropic's Messages vocabulary, as every source of it reports it (pure).

`anthropic-http` reads it from the API; `claude-cli` and `qwen-cli` from the same events
relayed in Claude Code's stream-json. One mapping of stop reasons, one reading of usage.
"""

from __future__ import annotations

from typing import Any

from olp.ir import FinishReason, Usage
from olp.providers._lenient import count, usd

__all__ = ["finish_reason", "usage_from"]

_STOP: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason(stop_reason: object, saw_tool_calls: bool = False) -> FinishReason:
    """The IR's reason; an unknown or missing one is "stop" (or "tool_calls" after some)."""
    if isinstance(stop_reason, str) and stop_reason in _STOP:
        return _STOP[stop_reason]
    return "tool_calls" if saw_tool_calls else "stop"


def usage_from(raw: object, cost: object = None, *, cache_in_input: bool = False) -> Usage:
    """Anthropic counts cache reads and writes apart from input_tokens; the IR includes them.

    `cache_in_input`: the source already counts them in input_tokens (Qwen Code, which
    relays OpenAI's prompt_tokens). `cost`: a CLI's own figure for the turn, if any.
    """
    doc: dict[str, Any] = raw if isinstance(raw, dict) else {}
    read = count(doc.get("cache_read_input_tokens"))
    write = count(doc.get("cache_creation_input_tokens"))
    prompt = count(doc.get("input_tokens")) + (0 if cache_in_input else read + write)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=count(doc.get("output_tokens")),
        cached_prompt_tokens=read,
        cache_write_tokens=write,
        cost_usd=usd(cost),
    )
