"""The cache key of one hop: sha256 over a versioned canonical encoding of the request.

Every field of the request IR is classified here as INCLUDED (it can change the answer, so
it is part of the key) or EXCLUDED (it cannot, or it is supplied separately); a test fails
when the IR gains a field nobody classified. Two requests with the same key must deserve
the same answer: when in doubt a field is included, because a spurious miss costs one
upstream call while a spurious hit returns a wrong answer.

The encoding is one JSON array (orjson: the request's INCLUDED fields, each at its own place,
`_POSITIONS`; each nested IR object as its class's tag and its INCLUDED fields in a fixed
order, `_FIELDS`; mappings such as tool schemas as objects with sorted keys),
which is unambiguous — no two different requests encode to the same bytes — and
independent of hash seeds, dict insertion order and locale. Sampling floats are normalised
(`1` and `1.0`, `0.0` and `-0.0` are the same temperature) and written with `repr`, which
is exact.

Per hop the key is `sha256(header || fingerprint)`, where the header names the schema
version, provider and hop model, and the fingerprint hashes the request's canonical bytes.
The fingerprint does not depend on the hop, so a caller walking a chain may compute it once
(`request_fingerprint`) and derive each hop's key with `hop_key`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

import orjson

from olp.ir import (
    ChatRequest,
    Forward,
    ImagePart,
    Message,
    NamedToolChoice,
    Passthrough,
    ReasoningPart,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCall,
    json_default,
)

__all__ = [
    "EXCLUDED",
    "EXCLUDED_EXTRA",
    "INCLUDED",
    "KEY_SCHEMA",
    "cache_key",
    "canonical_request",
    "hop_key",
    "request_fingerprint",
]

# Bump whenever the encoding below changes meaning: old entries then simply stop matching
# (and age out by TTL and LRU) instead of answering requests they were not made for.
KEY_SCHEMA = 6

# The nested IR classes as the key writes them: these fields, in this order (a reordering
# changes every key: bump KEY_SCHEMA).
_FIELDS: Mapping[type, tuple[str, ...]] = {
    Message: (
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "reasoning",
        "is_error",
        "cache_control",
    ),
    ReasoningPart: ("text", "signature", "encrypted"),
    # (Prompt-caching breakpoints do not change the answer, but a request's parts are
    # written whole: a moved breakpoint costs a miss, never a wrong hit.)
    TextPart: ("text", "cache_control"),
    ImagePart: ("url", "detail", "cache_control"),
    ToolCall: ("id", "name", "arguments"),
    # The description and schema steer the model as much as the prompt does.
    Tool: ("name", "description", "parameters", "strict", "cache_control"),
    NamedToolChoice: ("name",),
    ResponseFormat: ("type", "json_schema"),
    # Fields and headers of the client's own wire (an Anthropic beta changes the answer).
    Passthrough: ("wire", "fields", "headers"),
    # A forwarded endpoint's body is the request itself (such answers bypass the cache
    # today; keyed all the same, so caching them could never serve a wrong answer).
    Forward: ("endpoint", "body"),
}

# The request's INCLUDED fields, each at its place in the canonical array
# (`canonical_request`; a test keeps the two in step; a change of place changes every key:
# bump KEY_SCHEMA).
_POSITIONS = (
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "seed",
    # Pass-through options, minus EXCLUDED_EXTRA; unknown future ones are included.
    "extra",
    "passthrough",
    "forward",
)

INCLUDED: Mapping[type, frozenset[str]] = {
    ChatRequest: frozenset(_POSITIONS),
    **{cls: frozenset(names) for cls, names in _FIELDS.items()},
}

EXCLUDED: Mapping[type, frozenset[str]] = {
    ChatRequest: frozenset(
        {
            # The client's name for the model (maybe an alias); the key takes the hop's
            # canonical provider and model instead, so each hop has its own entries.
            "model",
            # Streaming and non-streaming requests share entries: both are event lists.
            "stream",
            # Providers always report usage; the encoder decides whether the client sees it.
            "include_usage",
            # Which spelling of the token limit the client used; the limit itself is keyed.
            "max_tokens_field",
            # An end-user id for the upstream's abuse tracking; it does not change answers.
            "user",
        }
    ),
    Message: frozenset(),
    TextPart: frozenset(),
    ImagePart: frozenset(),
    ToolCall: frozenset(),
    Tool: frozenset(),
    NamedToolChoice: frozenset(),
    ResponseFormat: frozenset(),
    ReasoningPart: frozenset(),
    Passthrough: frozenset(),
    Forward: frozenset(),
}

# `ChatRequest.extra` options that are bookkeeping for the upstream, not generation inputs.
EXCLUDED_EXTRA = frozenset({"metadata", "store", "service_tier"})


def cache_key(provider: str, model: str, request: ChatRequest) -> str:
    """The 64-hex-digit key of `request` served by `provider`'s `model`."""
    return hop_key(provider, model, request_fingerprint(request))


def request_fingerprint(request: ChatRequest) -> bytes:
    """sha256 of the request's canonical encoding; the same for every hop."""
    return hashlib.sha256(canonical_request(request)).digest()


def hop_key(provider: str, model: str, fingerprint: bytes) -> str:
    return hashlib.sha256(_hop_header(provider, model) + fingerprint).hexdigest()


@functools.lru_cache(maxsize=256)
def _hop_header(provider: str, model: str) -> bytes:
    return orjson.dumps(("olp-cache-key", KEY_SCHEMA, provider, model))


def canonical_request(request: ChatRequest) -> bytes:
    """The canonical bytes of every INCLUDED field of `request` (hop-independent)."""
    # One array, each field at its own place (`_POSITIONS`): no dict to build and no keys
    # to sort, half the cost of a document keyed by name. The places are fixed and each
    # value's JSON ends where it ends, so requests that differ in a field differ in bytes.
    temperature, top_p, extra = request.temperature, request.top_p, request.extra
    return orjson.dumps(
        (
            request.messages,
            request.tools,
            request.tool_choice,
            request.parallel_tool_calls,
            request.response_format,
            None if temperature is None else _number(temperature),
            None if top_p is None else _number(top_p),
            request.max_tokens,
            request.stop,
            request.seed,
            _extra(extra) if extra else None,
            request.passthrough,
            request.forward,
        ),
        option=_OPTIONS,
        default=_nested,
    )


# orjson hands every dataclass to `_nested`: its own dataclass path reads each field through
# the class's field table, about 7,000 instructions per message (valgrind), several times
# what the writers below cost; a conversation of 50 messages paid it 50 times per request.
_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS


def _writer(cls: type, names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    tag, read = cls.__name__, attrgetter(*names)  # (one name: `read` gives the value)
    return lambda value: (tag, read(value))


_WRITERS: Mapping[type, Callable[[Any], tuple[Any, ...]]] = {
    cls: _writer(cls, names) for cls, names in _FIELDS.items()
}


def _nested(value: object) -> Any:
    """A nested IR object as (its class's tag, its fields); a Mapping as a dict."""
    write = _WRITERS.get(type(value))
    return json_default(value) if write is None else write(value)


def _number(value: float) -> str:
    # `+ 0.0` folds -0.0 into 0.0; repr is the shortest exact form, locale-free.
    return repr(float(value) + 0.0)


def _extra(extra: Mapping[str, Any]) -> dict[str, Any] | None:
    """The options that are generation inputs; None when there are none (as with no extra)."""
    out: dict[str, Any] = {}
    for name, value in extra.items():
        if name in EXCLUDED_EXTRA:
            continue
        # Top-level numeric options (penalties) get the same int/float folding as sampling.
        if type(value) is int or type(value) is float:
            out[name] = _number(value)
        else:
            out[name] = value
    return out or None
