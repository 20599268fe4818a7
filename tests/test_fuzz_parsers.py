"""Every parser of untrusted input, fed whatever Hypothesis can make of it.

A client's request body, an upstream's JSON and SSE, a CLI's stdout lines, exit status
and stderr, the owner's config.json: each may be malformed, and each parser must then
raise OLP's own error (which the server turns into an OpenAI-shaped answer or a fallback,
and `olp start` into a message naming the problem) — never a KeyError, TypeError,
AttributeError, IndexError or RecursionError, which would be a 500 or a traceback. Inputs
are arbitrary bytes and JSON, and real captured lines (tests/fixtures/cli) or valid
documents with one part replaced or removed, which reach deeper than random JSON would.

The examples are derandomized, so CI always runs the same ones; raise OLP_FUZZ_EXAMPLES
(e.g. 20000) to explore further on your own machine.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzing import CHAT_REQUESTS, FUZZ, dumps, json_values, mutations
from olp.cache.keys import request_fingerprint
from olp.config import load_config
from olp.errors import ConfigError, OLPError, ProviderError
from olp.ir import (
    ChatRequest,
    Event,
    Finish,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from olp.providers._http_errors import error_for_status, error_from_payload, quota_from_headers
from olp.providers._reset_time import MAX_WAIT_S
from olp.providers._reset_time import parse_reset as parse_cli_reset
from olp.providers.anthropic_http import events as anthropic_events
from olp.providers.anthropic_http.translate import build_payload as anthropic_payload
from olp.providers.base import QuotaSnapshot
from olp.providers.claude_cli.translate import ClaudeTranslator
from olp.providers.codex_cli.events import AppServerTurn
from olp.providers.gemini_cli.events import GeminiStream
from olp.providers.openai_http import translate as openai
from olp.providers.qwen_cli.translate import QwenTranslator
from olp.providers.vibe_cli.events import VibeStream
from olp.wire.openai_chat.parse import parse_chat_request
from olp.wire.sse import SSEDecoder

FIXTURES = Path(__file__).parent / "fixtures" / "cli"
FINISH_REASONS = get_args(FinishReason)


def _fixture_lines(cli: str) -> list[Any]:
    docs = []
    for path in sorted((FIXTURES / cli).glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                docs.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue  # stray non-JSON output is in the fixtures on purpose
    assert docs, f"no captured {cli} lines"
    return docs


def _lines(docs: list[Any]) -> st.SearchStrategy[bytes]:
    """Stdout lines: captured, captured and mutated, any JSON, or any bytes."""
    return st.one_of(
        st.integers(0, len(docs) - 1).map(lambda i: dumps(docs[i])),
        mutations(docs).map(dumps),
        json_values.map(dumps),
        st.binary(max_size=200),
    )


def _valid(events: object) -> None:
    """Events a parser returned have the IR's types: the encoders rely on them."""
    assert isinstance(events, list)
    for event in events:
        if isinstance(event, TextDelta | ReasoningDelta):
            assert isinstance(event.text, str)
        elif isinstance(event, ToolCallDelta):
            assert type(event.index) is int and event.index >= 0
            assert event.id is None or isinstance(event.id, str)
            assert event.name is None or isinstance(event.name, str)
            assert isinstance(event.arguments, str)
        elif isinstance(event, Usage):
            counts = (event.prompt_tokens, event.completion_tokens, event.cached_prompt_tokens,
                      event.cache_write_tokens, event.reasoning_tokens)  # fmt: skip
            assert all(type(n) is int and 0 <= n < 2**53 for n in counts)
            assert event.cost_usd is None or (type(event.cost_usd) is float and event.cost_usd >= 0)
        else:
            assert isinstance(event, Finish) and event.reason in FINISH_REASONS


def _events_or_olp_error(call: Callable[[], object]) -> None:
    with contextlib.suppress(OLPError):
        _valid(call())


# -- the client's request ------------------------------------------------------------------


def _check_request(body: bytes) -> None:
    try:
        request = parse_chat_request(body)
    except OLPError:
        return
    assert isinstance(request, ChatRequest)
    # What a parsed request goes on to: its cache key and both HTTP providers' payloads.
    request_fingerprint(request)
    openai.encode_payload(openai.build_payload(request))
    with contextlib.suppress(OLPError):
        anthropic_payload("anthropic", request)


@FUZZ
@given(st.binary(max_size=300))
def test_request_body_any_bytes(body: bytes) -> None:
    _check_request(body)


@FUZZ
@given(json_values)
def test_request_body_any_json(doc: Any) -> None:
    _check_request(dumps(doc))


@FUZZ
@given(mutations(CHAT_REQUESTS))
def test_request_body_almost_valid(doc: Any) -> None:
    _check_request(dumps(doc))


def test_request_body_nested_beyond_any_limit() -> None:
    deep = b'{"model":"m","messages":[{"role":"user","content":' + b"[" * 5000 + b"]" * 5000
    _check_request(deep + b"}]}")


# -- HTTP upstreams --------------------------------------------------------------------------

OPENAI_CHUNKS: list[Any] = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]},
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {"index": 0, "id": "c", "function": {"name": "f", "arguments": "{"}}
                    ]
                },
            }
        ]
    },
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2,
                              "prompt_tokens_details": {"cached_tokens": 1}}},
    {"error": {"message": "overloaded", "type": "server_error", "code": 529}},
]  # fmt: skip
OPENAI_RESPONSES: list[Any] = [
    {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi", "tool_calls": None},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
]
ANTHROPIC_EVENTS: list[Any] = [
    {"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "content_block_start", "index": 1,
     "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}},
    {"type": "content_block_delta", "index": 1,
     "delta": {"type": "input_json_delta", "partial_json": "{}"}},
    {"type": "content_block_delta", "index": 2,
     "delta": {"type": "thinking_delta", "thinking": "h"}},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    {"type": "message_stop"},
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
]  # fmt: skip
ANTHROPIC_RESPONSES: list[Any] = [
    {
        "type": "message",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "thinking", "thinking": "hm"},
            {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 2, "cache_read_input_tokens": 1},
    }
]


def _chunks(docs: list[Any]) -> st.SearchStrategy[list[Any]]:
    captured = st.integers(0, len(docs) - 1).map(docs.__getitem__)
    return st.lists(st.one_of(captured, mutations(docs), json_values), max_size=8)


@FUZZ
@given(_chunks(OPENAI_CHUNKS), st.text(max_size=30))
def test_openai_stream(chunks: list[Any], raw: str) -> None:
    parser = openai.StreamParser("up")
    for data in [*(dumps(c).decode() for c in chunks), raw, "[DONE]"]:
        try:
            _valid(parser.feed(data))
        except OLPError:
            return


@FUZZ
@given(st.one_of(mutations(OPENAI_RESPONSES), json_values))
def test_openai_response(doc: Any) -> None:
    _events_or_olp_error(lambda: openai.events_from_response("up", doc))


@FUZZ
@given(_chunks(ANTHROPIC_EVENTS), st.none() | st.text(max_size=20))
def test_anthropic_stream(chunks: list[Any], event_name: str | None) -> None:
    parser = anthropic_events.StreamParser("up")
    for chunk in chunks:
        name = chunk.get("type") if isinstance(chunk, dict) else event_name
        try:
            _valid(
                parser.feed(name if isinstance(name, str) else event_name, dumps(chunk).decode())
            )
        except OLPError:
            return
    _valid(parser.end())


@FUZZ
@given(st.one_of(mutations(ANTHROPIC_RESPONSES), json_values))
def test_anthropic_response(doc: Any) -> None:
    _events_or_olp_error(lambda: anthropic_events.events_from_response("up", doc))


@FUZZ
@given(st.lists(st.binary(max_size=120), max_size=8))
def test_sse_decoder(chunks: list[bytes]) -> None:
    decoder = SSEDecoder(max_line_bytes=64)
    for chunk in chunks:
        try:
            decoder.feed(chunk)
        except ValueError as exc:  # its documented answer to an endless line
            message = str(exc)
            break
    else:
        return
    assert "line" in message


HEADER_NAMES = [
    "retry-after", "retry-after-ms", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens",
    "x-ratelimit-remaining-requests", "x-ratelimit-limit-requests",
    "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-requests-limit", "anthropic-ratelimit-unified-reset",
    "anthropic-ratelimit-unified-5h-utilization", "anthropic-ratelimit-unified-status",
]  # fmt: skip
header_values = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["nan", "inf", "-inf", "-1", "1e400", "9" * 40, "1h2m3.5s", "0.5"]),
    st.datetimes().map(lambda d: d.isoformat() + "Z"),
    st.integers(-(2**64), 2**64).map(str),
)
ERROR_BODIES: list[Any] = [
    {"error": {"message": "Rate limit reached. Please try again in 20s.",
               "type": "requests", "code": "rate_limit_exceeded", "param": None}},
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
]  # fmt: skip


def _sane_time(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value >= 0)


@FUZZ
@given(
    st.integers(400, 599),
    st.dictionaries(st.sampled_from(HEADER_NAMES), header_values, max_size=6),
    st.one_of(st.binary(max_size=200), mutations(ERROR_BODIES).map(dumps)),
)
def test_upstream_error_answer(status: int, headers: dict[str, str], body: bytes) -> None:
    error = error_for_status("up", status, headers, body)
    assert isinstance(error, ProviderError)
    assert _sane_time(error.retry_after) and _sane_time(error.reset_at)
    quota = quota_from_headers(headers, 1.7e9)
    assert quota is None or isinstance(quota, QuotaSnapshot)


@FUZZ
@given(st.one_of(json_values, mutations(ERROR_BODIES)))
def test_error_frame_inside_an_answer(error: Any) -> None:
    found = error_from_payload("up", error)
    assert isinstance(found, ProviderError)
    assert _sane_time(found.retry_after) and _sane_time(found.reset_at)


# How CLIs word a reset (tests/fixtures/cli/README.md §1.9, §6), with any numbers and zone names.
reset_texts = st.one_of(
    st.from_regex(r"limit reached\|[0-9]{9,11}", fullmatch=True),
    st.from_regex(r"try again in ([0-9]{1,25}d )?([0-9]{1,25}h )?[0-9]{1,25}m", fullmatch=True),
    st.from_regex(
        r"resets( at| on)? ([A-Za-z]{3,9} [0-9]{1,2}, ([0-9]{4}, )?)?[0-9]{1,2}(:[0-9]{2})?"
        r"(am|pm|a\.m\.|PM)?( \([^)]{1,64}\))?",
        fullmatch=True,
    ),
    st.text(max_size=80),
)


@FUZZ
@given(reset_texts, st.floats(0, 4e9))
def test_reset_times_cli_texts_name(text: str, now: float) -> None:
    at = parse_cli_reset(text, now)
    assert at is None or 0 <= at <= now + MAX_WAIT_S


# -- CLI output ----------------------------------------------------------------------------

ends = st.tuples(st.none() | st.integers(-255, 255), st.text(max_size=200))


def _run_lines(
    feed: Callable[[bytes], object], end: Callable[[], object], lines: list[bytes]
) -> None:
    try:
        for line in lines:
            _valid(feed(line))
        _valid(end())
    except OLPError:
        pass


@pytest.mark.parametrize("cli", ["claude", "qwen"])
def test_cli_translators(cli: str) -> None:
    docs = _fixture_lines(cli)
    make: Callable[[], Any] = {
        "claude": lambda: ClaudeTranslator("claude", lambda: 1.7e9, lambda _info: None),
        "qwen": lambda: QwenTranslator("qwen", lambda: 1.7e9),
    }[cli]

    @FUZZ
    @given(st.lists(_lines(docs), max_size=8), ends)
    def run(lines: list[bytes], end: tuple[int | None, str]) -> None:
        tr = make()
        _run_lines(tr.feed, lambda: tr.end(*end), lines)

    run()


@FUZZ
@given(st.lists(_lines(_fixture_lines("gemini")), max_size=8), ends)
def test_gemini_stream(lines: list[bytes], end: tuple[int | None, str]) -> None:
    stream = GeminiStream("gemini")
    _run_lines(stream.feed, lambda: stream.end(*end), lines)


VIBE_EXPORTS: list[Any] = [
    {"usage": {"input_tokens": 3, "output_tokens": 2, "cached_input_tokens": 1},
     "cost_usd": 0.01, "error": {"code": "rate_limited", "message": "slow down"}},
]  # fmt: skip
# export.json as `_read_export` hands it over: an object, or None.
vibe_exports = st.none() | mutations(VIBE_EXPORTS).filter(lambda d: isinstance(d, dict))


@FUZZ
@given(st.lists(_lines(_fixture_lines("vibe")), max_size=8), ends, vibe_exports)
def test_vibe_stream(lines: list[bytes], end: tuple[int | None, str], export: Any) -> None:
    stream = VibeStream("vibe")
    _run_lines(stream.feed, lambda: stream.end(*end, export), lines)


@FUZZ
@given(st.lists(_lines(_fixture_lines("codex")), max_size=10), ends)
def test_codex_app_server_turn(lines: list[bytes], end: tuple[int | None, str]) -> None:
    turn = AppServerTurn("codex", "gpt-5", "hi")

    def feed(line: bytes) -> list[Event]:
        got, reply = turn.feed(line)
        assert isinstance(reply, bytes)
        return got

    _run_lines(feed, lambda: turn.ended(*end), lines)


# -- config.json -----------------------------------------------------------------------------

VALID_CONFIGS: list[Any] = [
    {
        "$schema": "https://example.invalid/olp.schema.json",
        "server": {"host": "127.0.0.1", "port": 3456, "max_body_bytes": 1048576},
        "auth": {"allow_anonymous": False, "owner_endpoints_loopback_only": True},
        "providers": {
            "alpha": {"type": "openai-http", "base_url": "http://127.0.0.1:9/v1",
                      "api_key_env": "OPENAI_API_KEY", "models": ["gpt-4o-mini"],
                      "cacheable": False},
            "claude": {"type": "anthropic-http", "base_url": "http://127.0.0.1:9",
                       "models": ["claude-sonnet-4-5"], "max_concurrent": 8,
                       "timeouts": {"first_byte_ms": 30000}},
            "cc": {"type": "claude-cli", "env": {"ANTHROPIC_AUTH_TOKEN": "${GATEWAY_TOKEN}"}},
            "vibe": {"type": "vibe-cli", "enabled": False},
        },
        "routing": {
            "chains": {"sonnet": [{"provider": "claude", "model": "claude-sonnet-4-5"},
                                  {"provider": "alpha", "model": "gpt-4o-mini"}]},
            "soft_triggers": {"cc": {"daily_request_count_threshold": 100,
                                     "five_hour_window_percent_threshold": 80,
                                     "five_hour_capacity": 200}},
            "default_retry_after_s": 30,
            "max_cooldown_s": 21600,
        },
        "cache": {"enabled": True, "ttl_s": 86400, "max_entries_per_key": 100},
        "ledger": {"enabled": True},
        "pricing": {"gpt-4o-mini": {"input": 0.15, "output": 0.6, "cached_input": 0.075}},
    }
]  # fmt: skip


@pytest.fixture(scope="module")
def config_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("olp-home")


def _check_config(home: Path, raw: bytes) -> None:
    (home / "config.json").write_bytes(raw)
    env = {"OLP_HOME": str(home), "GATEWAY_TOKEN": "t", "HOME": str(home)}
    with contextlib.suppress(ConfigError):
        load_config(env, detect_local_servers=False)


def test_config_as_given_loads(config_home: Path) -> None:
    (config_home / "config.json").write_bytes(dumps(VALID_CONFIGS[0]))
    env = {"OLP_HOME": str(config_home), "GATEWAY_TOKEN": "t", "HOME": str(config_home)}
    assert set(load_config(env, detect_local_servers=False).providers) == {
        "alpha", "claude", "cc", "vibe"
    }  # fmt: skip


@pytest.mark.parametrize("kind", ["bytes", "json", "almost valid"])
def test_config_file(config_home: Path, kind: str) -> None:
    raw: st.SearchStrategy[bytes] = {
        "bytes": st.binary(max_size=300),
        "json": json_values.map(dumps),
        "almost valid": mutations(VALID_CONFIGS).map(dumps),
    }[kind]

    @FUZZ
    @given(raw)
    def run(body: bytes) -> None:
        _check_config(config_home, body)

    run()
