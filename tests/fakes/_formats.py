"""Wire formats the fake upstream speaks: OpenAI Chat Completions and Anthropic Messages.

Shaped after what the real APIs send (ids, object names, the role-only first OpenAI
chunk, Anthropic's message_start/ping/content_block_* sequence), so providers are tested
against realistic streams.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

__all__ = [
    "ANTHROPIC",
    "DEFAULT_TEXT",
    "OPENAI",
    "Format",
    "Frame",
    "content_prefix",
    "error_frame",
    "models",
    "split",
    "text_message",
    "text_stream",
    "thinking_message",
    "thinking_stream",
    "tool_message",
    "tool_stream",
]

Format = Literal["openai", "anthropic"]
OPENAI: Final = "openai"
ANTHROPIC: Final = "anthropic"
DEFAULT_TEXT = "Hello from fake upstream"
_CREATED = 1_700_000_000
_PROMPT_TOKENS = 12


@dataclass(frozen=True)
class Frame:
    data: bytes
    content: bool = False  # carries answer content (a delay goes before it)
    usage_only: bool = False  # OpenAI's usage chunk: sent only if include_usage was asked


def split(text: str, chunks: int) -> list[str]:
    """`text` in `chunks` nearly equal, non-empty pieces (fewer if it is too short)."""
    n = max(1, min(chunks, len(text)))
    size, extra = divmod(len(text), n)
    out, pos = [], 0
    for i in range(n):
        end = pos + size + (1 if i < extra else 0)
        out.append(text[pos:end])
        pos = end
    return out


def models() -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": "fake-model", "object": "model", "type": "model"}],
        "has_more": False,
    }


def _data(doc: Any) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


def _event(name: str, doc: Any) -> bytes:
    return b"event: " + name.encode() + b"\n" + _data(doc)


# -- OpenAI ---------------------------------------------------------------------------


def _oa_usage(usage: Mapping[str, Any] | None, completion: int) -> dict[str, Any]:
    if usage is not None:
        return dict(usage)
    return {
        "prompt_tokens": _PROMPT_TOKENS,
        "completion_tokens": completion,
        "total_tokens": _PROMPT_TOKENS + completion,
    }


def _oa_chunk(model: str, delta: Mapping[str, Any], finish: str | None = None) -> bytes:
    return _data(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": _CREATED,
            "model": model,
            "choices": [{"index": 0, "delta": dict(delta), "finish_reason": finish}],
        }
    )


def _oa_tail(model: str, finish: str, usage: dict[str, Any]) -> list[Frame]:
    usage_chunk = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": model,
        "choices": [],
        "usage": usage,
    }
    return [
        Frame(_oa_chunk(model, {}, finish)),
        Frame(_data(usage_chunk), usage_only=True),
        Frame(b"data: [DONE]\n\n"),
    ]


def _oa_message(
    model: str, message: dict[str, Any], finish: str, usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": _CREATED,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


# -- Anthropic ------------------------------------------------------------------------


def _an_usage(usage: Mapping[str, Any] | None, completion: int) -> dict[str, Any]:
    if usage is not None:
        return dict(usage)
    return {"input_tokens": _PROMPT_TOKENS, "output_tokens": completion}


def _an_head(model: str, usage: dict[str, Any]) -> list[Frame]:
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens"}
    start_usage["output_tokens"] = 1
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    return [
        Frame(_event("message_start", {"type": "message_start", "message": message})),
        Frame(_event("ping", {"type": "ping"})),
    ]


def _an_tail(
    stop_reason: str, usage: dict[str, Any], stop_sequence: str | None = None
) -> list[Frame]:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
        "usage": {"output_tokens": usage.get("output_tokens", 0)},
    }
    return [
        Frame(_event("message_delta", delta)),
        Frame(_event("message_stop", {"type": "message_stop"})),
    ]


def _an_block(index: int, block: Mapping[str, Any], deltas: list[dict[str, Any]]) -> list[Frame]:
    start = {"type": "content_block_start", "index": index, "content_block": dict(block)}
    frames = [Frame(_event("content_block_start", start), content=block["type"] == "tool_use")]
    for delta in deltas:
        doc = {"type": "content_block_delta", "index": index, "delta": delta}
        frames.append(Frame(_event("content_block_delta", doc), content=True))
    stop = {"type": "content_block_stop", "index": index}
    frames.append(Frame(_event("content_block_stop", stop)))
    return frames


def _an_message(
    model: str,
    content: list[dict[str, Any]],
    stop_reason: str,
    usage: dict[str, Any],
    stop_sequence: str | None = None,
) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage,
    }


# -- answers --------------------------------------------------------------------------


def text_message(
    kind: Format,
    model: str,
    text: str,
    usage: Mapping[str, Any] | None,
    finish: str | None,
    stop_sequence: str | None = None,
) -> dict[str, Any]:
    pieces = len(split(text, 1_000_000))
    if kind == OPENAI:
        message = {"role": "assistant", "content": text}
        return _oa_message(model, message, finish or "stop", _oa_usage(usage, pieces))
    content = [{"type": "text", "text": text}]
    usage_doc = _an_usage(usage, pieces)
    return _an_message(model, content, finish or "end_turn", usage_doc, stop_sequence)


def text_stream(
    kind: Format,
    model: str,
    text: str,
    chunks: int,
    usage: Mapping[str, Any] | None,
    finish: str | None,
    stop_sequence: str | None = None,
) -> list[Frame]:
    pieces = split(text, chunks)
    if kind == OPENAI:
        frames = [Frame(_oa_chunk(model, {"role": "assistant", "content": ""}))]
        frames += [Frame(_oa_chunk(model, {"content": p}), content=True) for p in pieces]
        return frames + _oa_tail(model, finish or "stop", _oa_usage(usage, len(pieces)))
    full = _an_usage(usage, len(pieces))
    deltas = [{"type": "text_delta", "text": p} for p in pieces]
    block = _an_block(0, {"type": "text", "text": ""}, deltas)
    return _an_head(model, full) + block + _an_tail(finish or "end_turn", full, stop_sequence)


def thinking_message(
    kind: Format, model: str, thinking: str, signature: str, text: str
) -> dict[str, Any]:
    if kind == OPENAI:
        message = {"role": "assistant", "content": text, "reasoning_content": thinking}
        return _oa_message(model, message, "stop", _oa_usage(None, 5))
    content = [
        {"type": "thinking", "thinking": thinking, "signature": signature},
        {"type": "text", "text": text},
    ]
    return _an_message(model, content, "end_turn", _an_usage(None, 5))


def thinking_stream(
    kind: Format, model: str, thinking: str, signature: str, text: str
) -> list[Frame]:
    if kind == OPENAI:
        frames = [Frame(_oa_chunk(model, {"role": "assistant", "content": ""}))]
        frames.append(Frame(_oa_chunk(model, {"reasoning_content": thinking}), content=True))
        frames.append(Frame(_oa_chunk(model, {"content": text}), content=True))
        return frames + _oa_tail(model, "stop", _oa_usage(None, 5))
    usage = _an_usage(None, 5)
    deltas = [{"type": "thinking_delta", "thinking": p} for p in split(thinking, 2)] + [
        {"type": "signature_delta", "signature": signature}
    ]
    block = {"type": "thinking", "thinking": "", "signature": ""}
    text_deltas = [{"type": "text_delta", "text": text}]
    return (
        _an_head(model, usage)
        + _an_block(0, block, deltas)
        + _an_block(1, {"type": "text", "text": ""}, text_deltas)
        + _an_tail("end_turn", usage)
    )


def tool_message(
    kind: Format, model: str, calls: Sequence[tuple[str, str]], text: str
) -> dict[str, Any]:
    if kind == OPENAI:
        tool_calls = [
            {"id": f"call_fake_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
        message = {"role": "assistant", "content": text or None, "tool_calls": tool_calls}
        return _oa_message(model, message, "tool_calls", _oa_usage(None, 7))
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": f"toolu_fake_{i}", "name": n, "input": orjson.loads(a or "{}")}
        for i, (n, a) in enumerate(calls)
    ]
    return _an_message(model, content, "tool_use", _an_usage(None, 7))


def tool_stream(
    kind: Format, model: str, calls: Sequence[tuple[str, str]], chunks: int, text: str
) -> list[Frame]:
    if kind == OPENAI:
        frames = [Frame(_oa_chunk(model, {"role": "assistant", "content": ""}))]
        if text:
            frames.append(Frame(_oa_chunk(model, {"content": text}), content=True))
        for i, (name, args) in enumerate(calls):
            first = {
                "index": i,
                "id": f"call_fake_{i}",
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            frames.append(Frame(_oa_chunk(model, {"tool_calls": [first]}), content=True))
            for piece in split(args, chunks) if args else []:
                delta = {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}
                frames.append(Frame(_oa_chunk(model, delta), content=True))
        return frames + _oa_tail(model, "tool_calls", _oa_usage(None, 7))
    usage = _an_usage(None, 7)
    frames = _an_head(model, usage)
    index = 0
    if text:
        frames += _an_block(0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": text}])
        index = 1
    for i, (name, args) in enumerate(calls):
        block = {"type": "tool_use", "id": f"toolu_fake_{i}", "name": name, "input": {}}
        # The real API opens every tool_use block with an empty input_json_delta.
        deltas = [{"type": "input_json_delta", "partial_json": ""}]
        deltas += [
            {"type": "input_json_delta", "partial_json": p}
            for p in (split(args, chunks) if args else [])
        ]
        frames += _an_block(index + i, block, deltas)
    return frames + _an_tail("tool_use", usage)


def content_prefix(kind: Format, frames: list[Frame], content_chunks: int) -> list[bytes]:
    """The frames up to and including the `content_chunks`-th content frame."""
    out: list[bytes] = []
    seen = 0
    for frame in frames:
        if frame.content:
            if seen == content_chunks:
                break
            seen += 1
        out.append(frame.data)
    return out


def error_frame(kind: Format, type_: str, message: str, code: str | None) -> bytes:
    if kind == OPENAI:
        error: dict[str, Any] = {"message": message, "type": type_, "param": None, "code": code}
        return _data({"error": error})
    return _event("error", {"type": "error", "error": {"type": type_, "message": message}})
