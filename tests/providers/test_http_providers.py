"""openai-http and anthropic-http against a real fake upstream on loopback.

Async code runs through `asyncio.run` inside plain tests (no pytest-asyncio): each test
owns its loop, its provider (closed in `finally`) and its FakeUpstream.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from email.utils import formatdate
from typing import Any

import pytest

from olp.config.model import ProviderConfig, Timeouts
from olp.errors import Failure, ProviderError
from olp.ir import (
    ChatRequest,
    Event,
    Finish,
    Message,
    ResponseBuilder,
    TextDelta,
    ToolCall,
    Usage,
    is_content,
)
from olp.providers.anthropic_http import AnthropicHttpProvider
from olp.providers.anthropic_http import plugin as anthropic_plugin
from olp.providers.base import HopContext, Provider
from olp.providers.openai_http import OpenAIHttpProvider
from olp.providers.openai_http import plugin as openai_plugin

from fakes.upstream import (
    DEFAULT_TEXT,
    DieMidStream,
    ErrorEvent,
    FakeUpstream,
    Garbage,
    Hang,
    Slow,
    Status,
    Text,
    ToolCalls,
)

KINDS = ["openai", "anthropic"]
CTX = HopContext(request_id="req-1")
FAST = Timeouts(connect_ms=1000, first_byte_ms=200, idle_ms=200, total_ms=5000)


def make(kind: str, base: str, **kw: Any) -> Provider:
    if kind == "openai":
        kw.setdefault("api_key", "sk-test")
        kw.setdefault("api_key_env", "OPENAI_API_KEY")
        return OpenAIHttpProvider(
            ProviderConfig("alpha", "openai-http", base_url=base + "/v1", **kw)
        )
    kw.setdefault("api_key", "ak-test")
    kw.setdefault("api_key_env", "ANTHROPIC_API_KEY")
    return AnthropicHttpProvider(ProviderConfig("haiku", "anthropic-http", base_url=base, **kw))


def request(stream: bool, **kw: Any) -> ChatRequest:
    return ChatRequest(model="m-1", messages=(Message("user", "hi"),), stream=stream, **kw)


def collect(provider: Provider, req: ChatRequest) -> tuple[list[Event], ProviderError | None]:
    """All events the provider yields, and the ProviderError that ended them, if any."""

    async def go() -> tuple[list[Event], ProviderError | None]:
        events: list[Event] = []
        try:
            async for event in provider.stream(req, CTX):
                events.append(event)
        except ProviderError as exc:
            return events, exc
        finally:
            await provider.aclose()
        return events, None

    return asyncio.run(go())


def fails(provider: Provider, req: ChatRequest) -> ProviderError:
    _, error = collect(provider, req)
    assert error is not None, "expected a ProviderError"
    return error


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_plugins_register_both_types() -> None:
    assert openai_plugin.type == "openai-http"
    assert openai_plugin.default_api_key_env == "OPENAI_API_KEY"
    assert anthropic_plugin.type == "anthropic-http"
    assert anthropic_plugin.default_api_key_env == "ANTHROPIC_API_KEY"
    provider = openai_plugin.factory(ProviderConfig("x", "openai-http"))
    assert isinstance(provider, Provider)
    assert provider.capabilities.tools
    assert provider.capabilities.vision


# -- success --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stream", [False, True])
def test_text(upstream: FakeUpstream, kind: str, stream: bool) -> None:
    upstream.script(Text("Hello there, world", chunks=4))
    events, error = collect(make(kind, upstream.base_url), request(stream))
    assert error is None
    assert text_of(events) == "Hello there, world"
    assert isinstance(events[-1], Finish)
    assert events[-1].reason == "stop"
    assert isinstance(events[-2], Usage)
    assert events[-2].prompt_tokens == 12
    if stream:
        assert sum(isinstance(e, TextDelta) for e in events) == 4
    sent = upstream.requests[0]
    assert sent.json["model"] == "m-1"
    assert sent.json.get("stream", False) is stream


def test_openai_request_shape(upstream: FakeUpstream) -> None:
    provider = make("openai", upstream.base_url, headers={"X-Title": "olp"})
    collect(provider, request(True))
    sent = upstream.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["Authorization"] == "Bearer sk-test"
    assert sent.headers["X-Title"] == "olp"
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.json["stream_options"] == {"include_usage": True}


def test_openai_without_a_key_sends_no_authorization(upstream: FakeUpstream) -> None:
    events, error = collect(
        make("openai", upstream.base_url, api_key=None, api_key_env=None), request(False)
    )
    assert error is None
    assert text_of(events) == DEFAULT_TEXT
    assert "Authorization" not in upstream.requests[0].headers


def test_anthropic_request_shape(upstream: FakeUpstream) -> None:
    collect(make("anthropic", upstream.base_url), request(True, max_tokens=None))
    sent = upstream.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "ak-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in sent.headers
    assert sent.json["max_tokens"] == 4096


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls(upstream: FakeUpstream, kind: str, stream: bool) -> None:
    upstream.script(
        ToolCalls([("weather", '{"city": "Oslo", "unit": "C"}'), ("now", "{}")], chunks=3)
    )
    events, error = collect(make(kind, upstream.base_url), request(stream))
    assert error is None
    built = ResponseBuilder().extend(events).build()
    assert [(c.name, c.arguments.replace(" ", "")) for c in built.tool_calls] == [
        ("weather", '{"city":"Oslo","unit":"C"}'),
        ("now", "{}"),
    ]
    assert all(c.id for c in built.tool_calls)
    assert built.finish_reason == "tool_calls"


@pytest.mark.parametrize("kind", KINDS)
def test_cache_usage_reaches_the_ir(upstream: FakeUpstream, kind: str) -> None:
    usage = (
        {
            "prompt_tokens": 50,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 40},
        }
        if kind == "openai"
        else {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 40}
    )
    upstream.script(Text("x", usage=usage))
    events, _ = collect(make(kind, upstream.base_url), request(True))
    assert Usage(50, 5, cached_prompt_tokens=40) in events


def test_openai_json_answer_to_a_streaming_request_is_accepted(upstream: FakeUpstream) -> None:
    body = b'{"choices":[{"index":0,"message":{"content":"whole"},"finish_reason":"stop"}]}'
    upstream.script(Garbage(body))
    events, error = collect(make("openai", upstream.base_url), request(True))
    assert error is None
    assert events == [TextDelta("whole"), Finish("stop")]


@pytest.mark.parametrize("kind", KINDS)
def test_event_stream_answer_to_a_plain_request_is_accepted(
    upstream: FakeUpstream, kind: str
) -> None:
    # Some servers stream whatever was asked: go by the answer's content type.
    frames = (
        b'data: {"choices":[{"index":0,"delta":{"content":"streamed"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
        if kind == "openai"
        else b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"streamed"}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    upstream.script(Garbage(frames, content_type="text/event-stream"))
    events, error = collect(make(kind, upstream.base_url), request(False))
    assert error is None
    assert events == [TextDelta("streamed"), Finish("stop")]


def test_error_answers_keep_their_connection(upstream: FakeUpstream) -> None:
    upstream.script(Status(429, oa_error("slow down", "requests")), Status(500, "oops"))
    provider = make("openai", upstream.base_url)

    async def go() -> list[Failure]:
        failures = []
        try:
            for _ in range(3):
                try:
                    [e async for e in provider.stream(request(True), CTX)]
                except ProviderError as exc:
                    failures.append(exc.failure)
        finally:
            await provider.aclose()
        return failures

    assert asyncio.run(go()) == [Failure.RATE_LIMITED, Failure.UPSTREAM_ERROR]
    assert len({r.peer_port for r in upstream.requests}) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_connection_is_reused_after_a_complete_stream(upstream: FakeUpstream, kind: str) -> None:
    provider = make(kind, upstream.base_url)

    async def go() -> None:
        try:
            for _ in range(3):
                events = [e async for e in provider.stream(request(True), CTX)]
                assert text_of(events) == DEFAULT_TEXT
        finally:
            await provider.aclose()

    asyncio.run(go())
    ports = {r.peer_port for r in upstream.requests}
    assert len(ports) == 1, "a finished stream must hand its connection back to the pool"


# -- status mapping -------------------------------------------------------------------


def oa_error(message: str, type_: str = "invalid_request_error", **extra: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, **extra}}


STATUS_CASES = [
    (
        Status(429, oa_error("Rate limit reached", "requests"), {"Retry-After": "7"}),
        Failure.RATE_LIMITED,
    ),
    (
        Status(429, oa_error("You exceeded your current quota", "insufficient_quota")),
        Failure.QUOTA_EXHAUSTED,
    ),
    (
        Status(429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}),
        Failure.RATE_LIMITED,
    ),
    (Status(402, oa_error("Insufficient credits")), Failure.QUOTA_EXHAUSTED),
    (
        Status(
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "Your credit balance is too low to access the Anthropic API.",
                },
            },
        ),
        Failure.QUOTA_EXHAUSTED,
    ),
    (
        Status(
            529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        ),
        Failure.OVERLOADED,
    ),
    (Status(503, "Service Unavailable"), Failure.OVERLOADED),
    (Status(500, oa_error("boom", "server_error")), Failure.UPSTREAM_ERROR),
    (Status(502, "<html>bad gateway</html>"), Failure.UPSTREAM_ERROR),
    (Status(401, oa_error("Incorrect API key provided", "invalid_api_key")), Failure.AUTH_FAILED),
    (Status(403, oa_error("forbidden", "permission_error")), Failure.AUTH_FAILED),
    (Status(400, oa_error("bad messages", param="messages")), Failure.INVALID_REQUEST),
    (Status(404, oa_error("The model `m-1` does not exist")), Failure.INVALID_REQUEST),
    (Status(413, oa_error("too large")), Failure.INVALID_REQUEST),
    (Status(422, oa_error("unprocessable")), Failure.INVALID_REQUEST),
    (Status(408, "timeout"), Failure.TIMEOUT),
    (Status(405, "method not allowed"), Failure.UPSTREAM_ERROR),
    (Status(409, "conflict"), Failure.UPSTREAM_ERROR),
    (Status(307, "", {"Location": "http://elsewhere/"}), Failure.UPSTREAM_ERROR),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("behaviour", "failure"), STATUS_CASES, ids=lambda v: str(getattr(v, "status", v))
)
def test_status_mapping(
    upstream: FakeUpstream, kind: str, behaviour: Status, failure: Failure
) -> None:
    upstream.script(behaviour)
    error = fails(make(kind, upstream.base_url), request(True))
    assert error.failure is failure
    assert error.upstream_status == behaviour.status
    assert error.provider == ("alpha" if kind == "openai" else "haiku")
    assert error.message.startswith(f"upstream HTTP {behaviour.status}: ")
    assert error.__cause__ is None  # a mapped answer, not a crash


def test_invalid_request_keeps_message_and_param(upstream: FakeUpstream) -> None:
    upstream.script(Status(400, oa_error("'messages' is too short", param="messages")))
    error = fails(make("openai", upstream.base_url), request(False))
    assert error.message == "upstream HTTP 400: 'messages' is too short"
    assert error.param == "messages"
    assert error.http_status == 400
    assert error.code == "provider_invalid_request"


def test_text_error_body_is_a_trimmed_snippet(upstream: FakeUpstream) -> None:
    upstream.script(Status(500, "  <html>\n  Internal   trouble " + "x" * 5000))
    error = fails(make("openai", upstream.base_url), request(False))
    assert error.message.startswith("upstream HTTP 500: <html> Internal trouble x")
    assert len(error.message) < 600


def test_huge_error_body_is_capped(upstream: FakeUpstream) -> None:
    upstream.script(Status(500, "y" * (2 * 1024 * 1024)))
    error = fails(make("openai", upstream.base_url), request(False))
    assert error.failure is Failure.UPSTREAM_ERROR


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after-ms": "1500", "Retry-After": "2"}, 1.5),
        ({"x-ratelimit-reset-requests": "6m0s", "x-ratelimit-remaining-requests": "0"}, 360.0),
        ({"x-ratelimit-reset-tokens": "20ms", "x-ratelimit-remaining-tokens": "0"}, 0.02),
    ],
)
def test_rate_limit_wait_is_read(
    upstream: FakeUpstream, headers: dict[str, str], expected: float
) -> None:
    upstream.script(Status(429, oa_error("Rate limit reached", "requests"), headers))
    error = fails(make("openai", upstream.base_url), request(False))
    assert error.failure is Failure.RATE_LIMITED
    assert error.retry_after == pytest.approx(expected, abs=1.0)


def test_retry_after_http_date(upstream: FakeUpstream) -> None:
    upstream.script(
        Status(429, oa_error("slow"), {"Retry-After": formatdate(time.time() + 120, usegmt=True)})
    )
    error = fails(make("openai", upstream.base_url), request(False))
    assert error.retry_after == pytest.approx(120, abs=3)


def test_quota_exhausted_reads_the_reset(upstream: FakeUpstream) -> None:
    reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    upstream.script(
        Status(
            429,
            {
                "type": "error",
                "error": {"type": "rate_limit_error", "message": "usage limit reached"},
            },
            {
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": reset,
            },
        )
    )
    error = fails(make("anthropic", upstream.base_url), request(True))
    assert error.failure is Failure.QUOTA_EXHAUSTED
    assert error.reset_at == pytest.approx(time.time() + 3600, abs=5)
    assert error.retry_after == pytest.approx(3600, abs=5)


# -- timeouts and broken upstreams ----------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stream", [False, True])
def test_hang_times_out_at_first_byte(upstream: FakeUpstream, kind: str, stream: bool) -> None:
    upstream.script(Hang(10))
    start = time.monotonic()
    error = fails(make(kind, upstream.base_url, timeouts=FAST), request(stream))
    elapsed = time.monotonic() - start
    assert error.failure is Failure.TIMEOUT
    assert error.message == "upstream timeout: first byte not received within 200 ms"
    assert 0.15 < elapsed < 2.0
    # OLP hung up, and the upstream saw it.
    assert upstream.wait_for(lambda: len(upstream.disconnects) == 1)


def test_slow_first_byte_within_deadline_is_fine(upstream: FakeUpstream) -> None:
    upstream.script(Slow(first_byte_delay_s=0.05))
    events, error = collect(make("openai", upstream.base_url, timeouts=FAST), request(True))
    assert error is None
    assert text_of(events) == DEFAULT_TEXT


@pytest.mark.parametrize("kind", KINDS)
def test_idle_timeout_between_chunks(upstream: FakeUpstream, kind: str) -> None:
    upstream.script(Slow(chunk_delay_s=0.6))
    error = fails(make(kind, upstream.base_url, timeouts=FAST), request(True))
    assert error.failure is Failure.TIMEOUT
    assert error.message == "upstream timeout: no data for 200 ms (idle)"


def test_total_timeout(upstream: FakeUpstream) -> None:
    upstream.script(Text(DEFAULT_TEXT, chunks=20, delay_s=0.05))
    timeouts = Timeouts(connect_ms=1000, first_byte_ms=1000, idle_ms=1000, total_ms=300)
    events, error = collect(make("openai", upstream.base_url, timeouts=timeouts), request(True))
    assert error is not None
    assert error.failure is Failure.TIMEOUT
    assert error.message == "upstream timeout: response not complete within 300 ms (total)"
    assert any(is_content(e) for e in events)


@pytest.mark.parametrize("kind", KINDS)
def test_die_mid_stream_after_content(upstream: FakeUpstream, kind: str) -> None:
    upstream.script(DieMidStream(after_chunks=2))
    events, error = collect(make(kind, upstream.base_url), request(True))
    assert sum(isinstance(e, TextDelta) for e in events) == 2
    assert error is not None
    assert error.failure is Failure.TRANSPORT
    assert error.message.startswith("upstream stream ended before completion")


@pytest.mark.parametrize("kind", KINDS)
def test_die_in_a_plain_body(upstream: FakeUpstream, kind: str) -> None:
    upstream.script(DieMidStream())
    events, error = collect(make(kind, upstream.base_url), request(False))
    assert events == []
    assert error is not None
    assert error.failure is Failure.TRANSPORT
    assert error.__cause__ is not None


@pytest.mark.parametrize("kind", KINDS)
def test_clean_end_without_terminal_event(upstream: FakeUpstream, kind: str) -> None:
    frame = (
        b'data: {"choices":[{"index":0,"delta":{"content":"half"}}]}\n\n'
        if kind == "openai"
        else b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"half"}}\n\n'
    )
    upstream.script(Garbage(frame, content_type="text/event-stream"))
    events, error = collect(make(kind, upstream.base_url), request(True))
    assert events == [TextDelta("half")]
    assert error is not None
    assert error.failure is Failure.TRANSPORT
    assert error.message == "upstream stream ended before completion"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("stream", [False, True])
def test_garbage_is_an_upstream_error(upstream: FakeUpstream, kind: str, stream: bool) -> None:
    upstream.script(Garbage(b"<html>definitely not json"))
    error = fails(make(kind, upstream.base_url), request(stream))
    assert error.failure is Failure.UPSTREAM_ERROR
    assert error.message.startswith("malformed response from upstream: ")


@pytest.mark.parametrize(
    ("kind", "body", "detail"),
    [
        ("openai", b'{"choices":[{"message":{"content":"hi","tool_calls":"oops"}}]}',
         "tool_calls is not a list of objects"),
        ("openai", b'{"choices":[{"message":{"tool_calls":[null]}}]}',
         "tool_calls is not a list of objects"),
        ("anthropic", b'{"type":"message","content":[null],"stop_reason":"end_turn"}',
         "content block is not an object"),
    ],
)  # fmt: skip
def test_json_of_the_wrong_shape_is_a_malformed_answer(
    upstream: FakeUpstream, kind: str, body: bytes, detail: str
) -> None:
    # Valid JSON, wrong shape: named as what it is, not as a bug in OLP's provider.
    upstream.script(Garbage(body))
    error = fails(make(kind, upstream.base_url), request(False))
    assert error.failure is Failure.UPSTREAM_ERROR
    assert error.message.startswith("malformed response from upstream: ")
    assert detail in error.message


@pytest.mark.parametrize("kind", KINDS)
def test_nonsense_usage_counts_are_dropped_not_trusted(upstream: FakeUpstream, kind: str) -> None:
    usage = (
        b'{"prompt_tokens":"12","completion_tokens":1e300,"cost":-5,"prompt_tokens_details":[1]}'
        if kind == "openai"
        else b'{"input_tokens":[3],"output_tokens":99999999999999999999999,'
        b'"cache_read_input_tokens":-4}'
    )
    body = (
        b'{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":' + usage + b"}"
        if kind == "openai"
        else b'{"type":"message","content":[{"type":"text","text":"hi"}],'
        b'"stop_reason":"end_turn","usage":' + usage + b"}"
    )
    upstream.script(Garbage(body))
    events, error = collect(make(kind, upstream.base_url), request(False))
    assert error is None
    assert [e for e in events if isinstance(e, Usage)] == [Usage()]
    assert text_of(events) == "hi"


def test_garbage_inside_an_event_stream(upstream: FakeUpstream) -> None:
    upstream.script(Garbage(b"data: {broken\n\n", content_type="text/event-stream"))
    error = fails(make("openai", upstream.base_url), request(True))
    assert error.failure is Failure.UPSTREAM_ERROR
    assert "malformed response from upstream" in error.message


def test_over_long_sse_line(upstream: FakeUpstream) -> None:
    upstream.script(
        Garbage(b"data: " + b"x" * (1024 * 1024 + 10), content_type="text/event-stream")
    )
    error = fails(make("openai", upstream.base_url), request(True))
    assert error.failure is Failure.UPSTREAM_ERROR
    assert "SSE line over 1024 KiB" in error.message


def test_over_large_body(upstream: FakeUpstream) -> None:
    upstream.script(Garbage(b" " * (32 * 1024 * 1024 + 1)))
    error = fails(make("openai", upstream.base_url), request(False))
    assert error.failure is Failure.UPSTREAM_ERROR
    assert "larger than 32 MiB" in error.message


@pytest.mark.parametrize(
    ("kind", "behaviour", "failure"),
    [
        ("openai", ErrorEvent("server_error", "The server had an error"), Failure.UPSTREAM_ERROR),
        (
            "openai",
            ErrorEvent("requests", "Rate limit", code="rate_limit_exceeded"),
            Failure.RATE_LIMITED,
        ),
        ("anthropic", ErrorEvent("overloaded_error", "Overloaded"), Failure.OVERLOADED),
        ("anthropic", ErrorEvent("api_error", "Internal"), Failure.UPSTREAM_ERROR),
    ],
)
def test_mid_stream_error_event(
    upstream: FakeUpstream, kind: str, behaviour: ErrorEvent, failure: Failure
) -> None:
    upstream.script(behaviour)
    events, error = collect(make(kind, upstream.base_url), request(True))
    assert sum(isinstance(e, TextDelta) for e in events) == 1
    assert error is not None
    assert error.failure is failure
    assert error.message == f"upstream error: {behaviour.message}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("kind", KINDS)
def test_connection_refused_is_transport(kind: str) -> None:
    error = fails(make(kind, f"http://127.0.0.1:{closed_port()}"), request(True))
    assert error.failure is Failure.TRANSPORT
    assert error.message.startswith("upstream connection failed: ")
    assert error.__cause__ is not None


# -- cancellation ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_aclose_closes_the_upstream_connection(upstream: FakeUpstream, kind: str) -> None:
    upstream.script(Text(DEFAULT_TEXT * 10, chunks=100, delay_s=0.02))
    provider = make(kind, upstream.base_url)

    async def go() -> list[Event]:
        got: list[Event] = []
        agen = provider.stream(request(True), CTX)
        assert isinstance(agen, AsyncIterator)
        try:
            async for event in agen:
                got.append(event)
                if len(got) == 2:
                    break
        finally:
            await agen.aclose()  # type: ignore[attr-defined]
            await provider.aclose()
        return got

    got = asyncio.run(go())
    assert len(got) == 2
    assert upstream.wait_for(lambda: len(upstream.disconnects) == 1, timeout=3)


@pytest.mark.parametrize("kind", KINDS)
def test_task_cancellation_closes_the_upstream_connection(
    upstream: FakeUpstream, kind: str
) -> None:
    upstream.script(Text(DEFAULT_TEXT * 10, chunks=100, delay_s=0.02))
    provider = make(kind, upstream.base_url)
    first = asyncio.Event

    async def consume(seen: asyncio.Event) -> None:
        async for _ in provider.stream(request(True), CTX):
            seen.set()

    async def go() -> None:
        seen = first()
        task = asyncio.create_task(consume(seen))
        try:
            await asyncio.wait_for(seen.wait(), 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await provider.aclose()

    asyncio.run(go())
    assert upstream.wait_for(lambda: len(upstream.disconnects) == 1, timeout=3)


def test_next_request_after_a_cancelled_stream_uses_a_fresh_connection(
    upstream: FakeUpstream,
) -> None:
    upstream.script(Text(DEFAULT_TEXT * 10, chunks=100, delay_s=0.02))
    provider = make("openai", upstream.base_url)

    async def go() -> list[Event]:
        try:
            agen = provider.stream(request(True), CTX)
            await agen.__anext__()
            await agen.aclose()  # type: ignore[attr-defined]
            return [e async for e in provider.stream(request(True), CTX)]
        finally:
            await provider.aclose()

    events = asyncio.run(go())
    assert text_of(events) == DEFAULT_TEXT
    first, second = upstream.requests
    assert first.peer_port != second.peer_port


# -- quota and health -----------------------------------------------------------------


def test_quota_from_openai_headers(upstream: FakeUpstream) -> None:
    provider = make("openai", upstream.base_url)
    assert provider.quota() is None
    headers = {
        "x-ratelimit-limit-requests": "100",
        "x-ratelimit-remaining-requests": "75",
        "x-ratelimit-reset-requests": "1m0s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "100",
        "x-ratelimit-reset-tokens": "6s",
    }
    upstream.script(Text("ok", headers=headers))
    collect(provider, request(True))
    snapshot = provider.quota()
    assert snapshot is not None
    assert snapshot.source == "headers"
    assert snapshot.remaining_requests == 75
    assert snapshot.remaining_tokens == 100
    assert snapshot.utilisation == pytest.approx(0.9)
    assert snapshot.reset_at == pytest.approx(time.time() + 60, abs=5)


def test_quota_from_anthropic_rate_limit_answer(upstream: FakeUpstream) -> None:
    provider = make("anthropic", upstream.base_url)
    reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 30))
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": reset,
        "anthropic-ratelimit-tokens-remaining": "5000",
        "retry-after": "30",
    }
    upstream.script(
        Status(
            429, {"type": "error", "error": {"type": "rate_limit_error", "message": "x"}}, headers
        )
    )
    error = fails(provider, request(False))
    assert error.failure is Failure.RATE_LIMITED
    snapshot = provider.quota()
    assert snapshot is not None
    assert snapshot.remaining_requests == 0
    assert snapshot.remaining_tokens == 5000
    assert snapshot.reset_at == pytest.approx(time.time() + 30, abs=5)


@pytest.mark.parametrize("kind", KINDS)
def test_health_ok(upstream: FakeUpstream, kind: str) -> None:
    provider = make(kind, upstream.base_url)
    health = asyncio.run(_health(provider))
    assert health.ok, health
    assert health.latency_ms is not None
    assert any("reachable: yes" in c for c in health.checks)
    assert upstream.requests[0].path == "/v1/models"


@pytest.mark.parametrize("kind", KINDS)
def test_health_rejected_key(upstream: FakeUpstream, kind: str) -> None:
    upstream.script(Status(401, oa_error("bad key", "invalid_api_key")))
    health = asyncio.run(_health(make(kind, upstream.base_url)))
    assert not health.ok
    env = "OPENAI_API_KEY" if kind == "openai" else "ANTHROPIC_API_KEY"
    assert health.fix == f"set {env} to a valid key"


def test_health_missing_key(upstream: FakeUpstream) -> None:
    health = asyncio.run(_health(make("openai", upstream.base_url, api_key=None)))
    assert not health.ok
    assert "credentials: OPENAI_API_KEY is not set" in health.checks
    assert health.fix == "set OPENAI_API_KEY"


@pytest.mark.parametrize("kind", KINDS)
def test_health_unreachable(kind: str) -> None:
    health = asyncio.run(_health(make(kind, f"http://127.0.0.1:{closed_port()}")))
    assert not health.ok
    assert any(c.startswith("reachable: no") for c in health.checks)
    assert health.fix is not None
    assert "reachable" in health.fix


async def _health(provider: Provider) -> Any:
    try:
        return await provider.health()
    finally:
        await provider.aclose()


def test_tool_call_with_bad_arguments_fails_before_any_call(upstream: FakeUpstream) -> None:
    bad = ChatRequest(
        model="m",
        messages=(
            Message("user", "x"),
            Message("assistant", None, tool_calls=(ToolCall("a", "f", "{"),)),
        ),
    )
    error = fails(make("anthropic", upstream.base_url), bad)
    assert error.failure is Failure.INVALID_REQUEST
    assert upstream.calls == 0
