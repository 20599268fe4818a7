"""The cache key: deterministic, sensitive to every included field, blind to the rest."""

from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import orjson
import pytest

import olp.ir.events
import olp.ir.request
from olp.cache import codec, keys
from olp.cache.keys import (
    EXCLUDED,
    EXCLUDED_EXTRA,
    INCLUDED,
    cache_key,
    canonical_request,
    hop_key,
    request_fingerprint,
)
from olp.ir import (
    ChatRequest,
    Finish,
    Forward,
    ImagePart,
    Message,
    NamedToolChoice,
    Passthrough,
    RawBody,
    ReasoningDelta,
    ReasoningPart,
    ResponseFormat,
    TextDelta,
    TextPart,
    Tool,
    ToolCall,
    ToolCallDelta,
    Usage,
)

# Built in this process and in subprocesses with other hash seeds: the tool's properties
# come from iterating a set, so their insertion order changes with PYTHONHASHSEED.
REQUEST_SRC = """
from olp.ir import ChatRequest, Message, Tool, TextPart, ImagePart
names = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}
props = {name: {"type": "string", "description": name * 2} for name in names}
request = ChatRequest(
    model="gpt-x",
    messages=(
        Message("system", "You are terse."),
        Message("user", (TextPart("What is in"), ImagePart("https://x/cat.png", "low"))),
    ),
    tools=(Tool("lookup", "Look things up", {"type": "object", "properties": props}),),
    temperature=0.7,
    top_p=0.9,
    max_tokens=256,
    stop=("END",),
    seed=42,
    extra={name: 0.5 for name in {"frequency_penalty", "presence_penalty"}},
)
"""


def build() -> ChatRequest:
    scope: dict[str, Any] = {}
    exec(REQUEST_SRC, scope)
    request: ChatRequest = scope["request"]
    return request


def key(request: ChatRequest, provider: str = "openai", model: str = "gpt-x") -> str:
    return cache_key(provider, model, request)


def test_key_is_sha256_hex_and_stable_in_process() -> None:
    k = key(build())
    assert len(k) == 64
    assert int(k, 16) >= 0
    assert key(build()) == k


def test_key_is_the_same_in_other_processes_with_other_hash_seeds() -> None:
    script = REQUEST_SRC + "\nfrom olp.cache import cache_key\n"
    script += "print(cache_key('openai', 'gpt-x', request))\n"
    keys = set()
    for seed in ("1", "2", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        keys.add(out.stdout.strip())
    assert keys == {key(build())}


def test_fingerprint_and_hop_key_compose_to_the_key() -> None:
    request = build()
    fp = request_fingerprint(request)
    assert hop_key("openai", "gpt-x", fp) == key(request)
    assert hop_key("anthropic", "gpt-x", fp) != key(request)


# -- classification ----------------------------------------------------------------------


def _dataclasses_of(module: Any) -> set[type]:
    return {
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and dataclasses.is_dataclass(obj)
        and obj.__module__ == module.__name__
    }


def test_every_request_ir_class_and_field_is_classified() -> None:
    """Fails when the request IR gains a class or a field nobody classified for the key."""
    classes = _dataclasses_of(olp.ir.request)
    assert classes == set(INCLUDED) == set(EXCLUDED)
    for cls in classes:
        names = {f.name for f in dataclasses.fields(cls)}
        assert INCLUDED[cls].isdisjoint(EXCLUDED[cls]), cls.__name__
        unclassified = names - INCLUDED[cls] - EXCLUDED[cls]
        assert not unclassified, f"{cls.__name__}: classify {unclassified} in olp.cache.keys"
        assert INCLUDED[cls] | EXCLUDED[cls] == names, f"{cls.__name__}: stale names"


def test_nested_classes_are_written_with_every_included_field() -> None:
    """The key writes a nested IR object as its class's tag and its INCLUDED fields.

    Excluding a field of one would need it left out of `keys._FIELDS` and put in EXCLUDED.
    """
    for cls in set(INCLUDED) - {ChatRequest}:
        assert not EXCLUDED[cls], f"{cls.__name__}: keys.py writes it whole"
        tag, fields = keys._nested(_sample(cls))
        values = fields if len(INCLUDED[cls]) > 1 else (fields,)
        assert tag == cls.__name__
        assert len(values) == len(INCLUDED[cls]), cls.__name__


def test_a_mapping_in_the_request_is_written_as_a_sorted_object() -> None:
    """Schemas and extras are Mappings: the same keys in another order are the same key."""
    one = replace(BASE, tools=(Tool("f", parameters={"type": "object", "required": []}),))
    other = replace(BASE, tools=(Tool("f", parameters={"required": [], "type": "object"}),))
    assert canonical_request(one) == canonical_request(other)
    assert b'"required":[],"type":"object"' in canonical_request(one)


def _sample(cls: type) -> Any:
    required = {
        f.name: "x"
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return cls(**required)


# What the codec writes for each event type; a new field must bump CODEC_VERSION.
CODEC_FIELDS = {
    TextDelta: ("text",),
    ReasoningDelta: ("text", "signature", "encrypted"),
    ToolCallDelta: ("index", "id", "name", "arguments"),
    Usage: (
        "prompt_tokens",
        "completion_tokens",
        "cached_prompt_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "cost_usd",
    ),
    Finish: ("reason", "stop_sequence"),
    RawBody: ("data",),
}


def test_every_event_field_is_known_to_the_codec() -> None:
    assert _dataclasses_of(olp.ir.events) == set(CODEC_FIELDS)
    for cls, names in CODEC_FIELDS.items():
        got = tuple(f.name for f in dataclasses.fields(cls))
        assert got == names, f"{cls.__name__} changed: update olp.cache.codec, bump CODEC_VERSION"
    assert codec.CODEC_VERSION == 3


# -- sensitivity ---------------------------------------------------------------------------

BASE = ChatRequest(model="gpt-x", messages=(Message("user", "hi"),))

# One changed value for each INCLUDED field of ChatRequest.
REQUEST_CHANGES: dict[str, Any] = {
    "messages": (Message("user", "hello"),),
    "tools": (Tool("f"),),
    "tool_choice": "required",
    "parallel_tool_calls": False,
    "response_format": ResponseFormat("json_object"),
    "temperature": 0.2,
    "top_p": 0.5,
    "max_tokens": 100,
    "stop": ("x",),
    "seed": 7,
    "extra": {"frequency_penalty": 0.5},
    "passthrough": Passthrough("anthropic_messages", {"context_management": {}}),
    "forward": Forward("embeddings", {"input": "x"}),
}

# For each nested class: how to put an instance into a request, a base instance, and one
# changed value for each of its INCLUDED fields.
NESTED: dict[type, tuple[Callable[[Any], ChatRequest], Any, dict[str, Any]]] = {
    Message: (
        lambda m: replace(BASE, messages=(m,)),
        Message("user", "hi"),
        {
            "role": "system",
            "content": (TextPart("hi"),),
            "name": "bob",
            "tool_calls": (ToolCall("c1", "f", "{}"),),
            "tool_call_id": "c1",
            "reasoning": (ReasoningPart("hmm", "sig"),),
            "is_error": True,
            "cache_control": {"type": "ephemeral"},
        },
    ),
    ReasoningPart: (
        lambda r: replace(BASE, messages=(Message("assistant", "ok", reasoning=(r,)),)),
        ReasoningPart("hmm", "sig"),
        {"text": "well", "signature": "sig2", "encrypted": "opaque"},
    ),
    Forward: (
        lambda f: replace(BASE, forward=f),
        Forward("embeddings", {"input": "x"}),
        {"endpoint": "completions", "body": {"input": "y"}},
    ),
    Passthrough: (
        lambda p: replace(BASE, passthrough=p),
        Passthrough("anthropic_messages"),
        {"wire": "openai_chat", "fields": {"a": 1}, "headers": {"anthropic-beta": "x"}},
    ),
    TextPart: (
        lambda p: replace(BASE, messages=(Message("user", (p,)),)),
        TextPart("a"),
        {"text": "b", "cache_control": {"type": "ephemeral"}},
    ),
    ImagePart: (
        lambda p: replace(BASE, messages=(Message("user", (p,)),)),
        ImagePart("https://x/a.png"),
        {"url": "https://x/b.png", "detail": "high", "cache_control": {"type": "ephemeral"}},
    ),
    ToolCall: (
        lambda c: replace(BASE, messages=(Message("assistant", None, tool_calls=(c,)),)),
        ToolCall("c1", "f", "{}"),
        {"id": "c2", "name": "g", "arguments": '{"a": 1}'},
    ),
    Tool: (
        lambda t: replace(BASE, tools=(t,)),
        Tool("f"),
        {
            "name": "g",
            "description": "d",
            "parameters": {"type": "object"},
            "strict": True,
            "cache_control": {"type": "ephemeral"},
        },
    ),
    NamedToolChoice: (
        lambda c: replace(BASE, tools=(Tool("f"),), tool_choice=c),
        NamedToolChoice("f"),
        {"name": "g"},
    ),
    ResponseFormat: (
        lambda f: replace(BASE, response_format=f),
        ResponseFormat("json_schema", {"name": "a"}),
        {"type": "json_object", "json_schema": {"name": "b"}},
    ),
}


def test_the_sensitivity_tables_cover_every_included_field() -> None:
    assert set(REQUEST_CHANGES) == INCLUDED[ChatRequest]
    assert set(NESTED) == set(INCLUDED) - {ChatRequest}
    for cls, (_, _, changes) in NESTED.items():
        assert set(changes) == INCLUDED[cls], cls.__name__


@pytest.mark.parametrize("name", sorted(REQUEST_CHANGES))
def test_each_included_request_field_changes_the_key(name: str) -> None:
    assert key(replace(BASE, **{name: REQUEST_CHANGES[name]})) != key(BASE)


@pytest.mark.parametrize("name", sorted(REQUEST_CHANGES))
def test_each_included_request_field_is_written_at_its_own_place(name: str) -> None:
    """The canonical array holds every INCLUDED field once: changing one changes its place
    (`keys._POSITIONS`) and no other."""
    assert len(set(keys._POSITIONS)) == len(keys._POSITIONS)  # (INCLUDED is made from it)
    base = orjson.loads(canonical_request(BASE))
    changed = orjson.loads(canonical_request(replace(BASE, **{name: REQUEST_CHANGES[name]})))
    assert len(base) == len(changed) == len(keys._POSITIONS)
    places = zip(keys._POSITIONS, base, changed, strict=True)
    assert [field for field, a, b in places if a != b] == [name]


@pytest.mark.parametrize(
    ("cls", "name"),
    [(cls, name) for cls, (_, _, changes) in NESTED.items() for name in changes],
    ids=lambda v: v.__name__ if isinstance(v, type) else str(v),
)
def test_each_included_nested_field_changes_the_key(cls: type, name: str) -> None:
    wrap, base, changes = NESTED[cls]
    assert key(wrap(replace(base, **{name: changes[name]}))) != key(wrap(base))


EXCLUDED_CHANGES: dict[str, Any] = {
    "model": "some-alias",
    "stream": True,
    "include_usage": True,
    "max_tokens_field": "max_completion_tokens",
    "user": "user-123",
}


def test_the_excluded_table_covers_every_excluded_field() -> None:
    assert set(EXCLUDED_CHANGES) == EXCLUDED[ChatRequest]


@pytest.mark.parametrize("name", sorted(EXCLUDED_CHANGES))
def test_excluded_request_fields_do_not_change_the_key(name: str) -> None:
    assert key(replace(BASE, **{name: EXCLUDED_CHANGES[name]})) == key(BASE)


@pytest.mark.parametrize("name", sorted(EXCLUDED_EXTRA))
def test_bookkeeping_extras_do_not_change_the_key(name: str) -> None:
    assert key(replace(BASE, extra={name: {"a": "b"}})) == key(BASE)


def test_unknown_extras_change_the_key() -> None:
    assert key(replace(BASE, extra={"some_future_option": 1})) != key(BASE)


def test_provider_and_model_are_part_of_the_key() -> None:
    assert key(BASE, "openai", "m") != key(BASE, "groq", "m")
    assert key(BASE, "openai", "m") != key(BASE, "openai", "m2")
    # Field boundaries cannot shift: ("ab", "c") is not ("a", "bc").
    assert key(BASE, "ab", "c") != key(BASE, "a", "bc")


def test_message_boundaries_cannot_shift() -> None:
    a = replace(BASE, messages=(Message("user", "ab"), Message("user", "c")))
    b = replace(BASE, messages=(Message("user", "a"), Message("user", "bc")))
    assert key(a) != key(b)


# -- normalisation -------------------------------------------------------------------------


def test_equal_numbers_give_equal_keys() -> None:
    assert key(replace(BASE, temperature=1)) == key(replace(BASE, temperature=1.0))
    assert key(replace(BASE, temperature=0.0)) == key(replace(BASE, temperature=-0.0))
    assert key(replace(BASE, extra={"frequency_penalty": 0})) == key(
        replace(BASE, extra={"frequency_penalty": 0.0})
    )
    assert key(replace(BASE, temperature=0.7)) != key(replace(BASE, temperature=0.7000001))
    assert key(replace(BASE, temperature=0.0)) != key(BASE)  # 0 is not "unset"


def test_object_key_order_and_mapping_type_do_not_matter() -> None:
    one = Tool("f", parameters={"type": "object", "properties": {"a": {}, "b": {}}})
    two = Tool(
        "f", parameters=MappingProxyType({"properties": {"b": {}, "a": {}}, "type": "object"})
    )
    assert key(replace(BASE, tools=(one,))) == key(replace(BASE, tools=(two,)))
    assert key(replace(BASE, extra={"a": 1, "b": 2})) == key(replace(BASE, extra={"b": 2, "a": 1}))


def test_text_content_and_a_single_text_part_are_kept_apart() -> None:
    # Different wire shapes; a spurious miss at worst, never a spurious hit.
    plain = replace(BASE, messages=(Message("user", "hi"),))
    parts = replace(BASE, messages=(Message("user", (TextPart("hi"),)),))
    assert key(plain) != key(parts)
