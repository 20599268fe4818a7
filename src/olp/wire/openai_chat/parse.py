"""A Chat Completions request body -> `ChatRequest`, or `InvalidRequest` naming the field.

This runs for every request, so it is hand-written: direct type checks, no schema library,
error paths built only when failing. Rules a caller may notice:

- an explicit `null` means "not given", for every optional field;
- known pass-through options are type-checked and kept in `ChatRequest.extra`; unknown
  top-level keys (a server's own sampling options: vLLM's `top_k`, `min_p`,
  `repetition_penalty`, `chat_template_kwargs`, ...) are kept as they came in
  `ChatRequest.passthrough`, for the OpenAI-compatible upstreams that may understand them;
- `stop: []` means no stop sequences; a `""` stop string is dropped likewise;
- `include_usage` is True only for a streaming request that asked for it;
- with both `max_tokens` and `max_completion_tokens`, the latter wins (both are checked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from olp.ir import ChatRequest, Passthrough, ResponseFormat
from olp.wire._json import load_object
from olp.wire.openai_chat._checks import (
    as_bool,
    as_int,
    as_number,
    as_object,
    as_str,
    bounded,
    invalid,
    kind,
    model_name,
)
from olp.wire.openai_chat._messages import parse_messages
from olp.wire.openai_chat._tools import parse_response_format, parse_tool_choice, parse_tools

__all__ = ["WIRE", "parse_chat_request"]

WIRE = "openai_chat"  # the `Passthrough.wire` of this wire's unknown fields

_MAX_STOP = 4
# A signed 64-bit integer, as OpenAI's API defines `seed`.
_SEED_RANGE = (-(2**63), 2**63 - 1)
_T = TypeVar("_T")


def parse_chat_request(body: bytes) -> ChatRequest:
    obj = load_object(body)
    return _request(obj)


def _request(obj: dict[str, Any]) -> ChatRequest:
    get = obj.get
    model = model_name(get("model"))
    messages = parse_messages(get("messages"))
    if len(obj) == 2:
        # The most common request, just `model` and `messages`: the defaults are right.
        return ChatRequest(model=model, messages=messages)
    _check_n(get("n"))
    tools = parse_tools(get("tools"), get("functions"))
    tool_choice = parse_tool_choice(get("tool_choice"), get("function_call"), tools)
    stream, include_usage = _stream(get("stream"), get("stream_options"))
    max_tokens, max_tokens_field = _max_tokens(get("max_tokens"), get("max_completion_tokens"))
    return ChatRequest(
        model=model,
        messages=messages,
        stream=stream,
        include_usage=include_usage,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=_opt(get("parallel_tool_calls"), as_bool, "parallel_tool_calls"),
        response_format=_response_format(get("response_format")),
        temperature=_opt_number(get("temperature"), "temperature", 0.0, 2.0),
        top_p=_opt_number(get("top_p"), "top_p", 0.0, 1.0),
        max_tokens=max_tokens,
        max_tokens_field=max_tokens_field,
        stop=_stop(get("stop")),
        seed=_opt(get("seed"), _seed, "seed"),
        user=_opt(get("user"), as_str, "user"),
        extra=_extra(obj),
        passthrough=_unknown(obj),
    )


def _opt(value: object, check: Callable[[object, str], _T], path: str) -> _T | None:
    return None if value is None else check(value, path)


def _opt_number(value: object, path: str, lo: float, hi: float) -> float | None:
    return None if value is None else as_number(value, path, lo, hi)


def _response_format(value: object) -> ResponseFormat | None:
    return None if value is None else parse_response_format(value)


def _check_n(value: object) -> None:
    # OLP answers with exactly one choice; silently ignoring n would lose answers.
    if value is None or (value == 1 and type(value) is int):
        return
    if type(value) is not int:
        raise invalid("n", f"must be an integer (got {kind(value)})")
    raise invalid("n", f"only n=1 is supported (got {value})")


def _stream(stream: object, options: object) -> tuple[bool, bool]:
    streaming = False if stream is None else as_bool(stream, "stream")
    if options is None:
        return streaming, False
    include = as_object(options, "stream_options").get("include_usage")
    if include is None:
        return streaming, False
    # A usage chunk only exists in a stream, so the flag means nothing without one.
    return streaming, streaming and as_bool(include, "stream_options.include_usage")


def _max_tokens(
    legacy: object, current: object
) -> tuple[int | None, Literal["max_tokens", "max_completion_tokens"]]:
    if legacy is not None:
        legacy = as_int(legacy, "max_tokens", 1)
    if current is not None:
        return as_int(current, "max_completion_tokens", 1), "max_completion_tokens"
    return legacy, "max_tokens"


def _stop(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if type(value) is str:
        return (value,) if value else ()
    if type(value) is not list:
        raise invalid("stop", f"must be a string or an array of strings (got {kind(value)})")
    if len(value) > _MAX_STOP:
        raise invalid("stop", f"at most {_MAX_STOP} stop sequences are allowed (got {len(value)})")
    for i, item in enumerate(value):
        as_str(item, f"stop[{i}]")
    return tuple(s for s in value if s)


def _seed(value: object, path: str) -> int:
    return as_int(value, path, *_SEED_RANGE)


def _penalty(value: object, path: str) -> float:
    return as_number(value, path, -2.0, 2.0)


def _top_logprobs(value: object, path: str) -> int:
    return as_int(value, path, 0, 20)


def _array(value: object, path: str) -> list[Any]:
    if type(value) is not list:
        raise invalid(path, f"must be an array (got {kind(value)})")
    return value


# Options OLP forwards without interpreting them, with the check each value must pass.
_EXTRAS: tuple[tuple[str, Callable[[object, str], object]], ...] = (
    ("frequency_penalty", _penalty),
    ("presence_penalty", _penalty),
    ("logit_bias", as_object),
    ("logprobs", as_bool),
    ("top_logprobs", _top_logprobs),
    ("reasoning_effort", as_str),
    ("metadata", as_object),
    ("store", as_bool),
    ("service_tier", as_str),
    ("prediction", as_object),
    ("modalities", _array),
    ("verbosity", as_str),
    ("web_search_options", as_object),
)


_EXTRA_KEYS = frozenset(key for key, _ in _EXTRAS)
# Every other key `_request` reads; a body with none of them takes the short path.
_OPTIONAL = frozenset(
    {
        "n",
        "tools",
        "functions",
        "tool_choice",
        "function_call",
        "parallel_tool_calls",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "response_format",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "user",
    }
).union(_EXTRA_KEYS)


# Every key `_request` interprets; any other one is passed through (`_unknown`).
_KNOWN = _OPTIONAL.union({"model", "messages"})


def _extra(obj: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if _EXTRA_KEYS.isdisjoint(obj):
        return extra
    for key, check in _EXTRAS:
        value = obj.get(key)
        if value is not None:
            extra[key] = bounded(check(value, key), key)
    return extra


def _unknown(obj: dict[str, Any]) -> Passthrough | None:
    fields = {k: bounded(v, k) for k, v in obj.items() if k not in _KNOWN and v is not None}
    return Passthrough(WIRE, fields) if fields else None
