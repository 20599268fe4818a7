"""Hypothesis strategies for untrusted JSON, shared by the fuzz tests.

`mutations(docs)` takes a valid document and replaces or removes one value anywhere in
it: such inputs get past the first checks and reach deeper than random JSON would.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ = settings(
    max_examples=int(os.environ.get("OLP_FUZZ_EXAMPLES", "150")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=16,
)


def dumps(doc: Any) -> bytes:
    # The stdlib writes what orjson refuses (integers past 64 bits), as a client may.
    return json.dumps(doc).encode()


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*at, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _paths(value, (*at, i))


def _mutated(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        copy = dict(doc)
        if delete and not rest:
            copy.pop(head, None)
        else:
            copy[head] = _mutated(doc[head], rest, value, delete)
        return copy
    copy_list = list(doc)
    if delete and not rest:
        del copy_list[head]
    else:
        copy_list[head] = _mutated(doc[head], rest, value, delete)
    return copy_list


@st.composite
def mutations(draw: st.DrawFn, docs: list[Any]) -> Any:
    """One of `docs`, with one value somewhere in it replaced by any JSON, or removed."""
    doc = docs[draw(st.integers(0, len(docs) - 1))]  # (an index: a short repr)
    path = draw(st.sampled_from(list(_paths(doc))))
    return _mutated(doc, path, draw(json_values), draw(st.booleans()))


# Valid chat requests, plain and with every part OLP parses: the seeds of `mutations`.
CHAT_REQUESTS: list[Any] = [
    {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "max_tokens": 50,
        "stop": ["x"],
        "seed": 7,
        "messages": [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a": 1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "f", "parameters": {"type": "object"}, "strict": True},
            }
        ],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {}}},
    },
]


# Valid Anthropic Messages requests, plain and with every part OLP parses.
MESSAGES_REQUESTS: list[Any] = [
    {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
    {
        "model": "m",
        "max_tokens": 50,
        "stream": True,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 5,
        "stop_sequences": ["x"],
        "metadata": {"user_id": "u1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "messages": [
            {"role": "system", "content": "mid-conversation system text"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "let me look"},
                    {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "is_error": False,
                        "content": [{"type": "text", "text": "42"}],
                    },
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
        "tools": [
            {
                "name": "f",
                "description": "a tool",
                "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
            }
        ],
        "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": True},
    },
]
