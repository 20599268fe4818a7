"""HTTP providers under many concurrent requests: no hidden pool, `max_concurrent` slots.

A request waiting for a slot has not been sent: its wait is not the upstream's first-byte
time, and if it never gets a slot the error says so.
"""

from __future__ import annotations

import asyncio
import time

from olp.config.model import ProviderConfig, Timeouts
from olp.errors import Failure, ProviderError
from olp.ir import ChatRequest, Message, TextDelta
from olp.providers.base import HopContext
from olp.providers.openai_http import OpenAIHttpProvider

from fakes.upstream import DEFAULT_TEXT, FakeUpstream, Slow

CTX = HopContext(request_id="req-1")


def provider(base_url: str, timeouts: Timeouts, max_concurrent: int | None) -> OpenAIHttpProvider:
    config = ProviderConfig(
        "alpha",
        "openai-http",
        base_url=base_url + "/v1",
        timeouts=timeouts,
        max_concurrent=max_concurrent,
    )
    return OpenAIHttpProvider(config)


async def answer(p: OpenAIHttpProvider) -> str | ProviderError:
    request = ChatRequest(model="m-1", messages=(Message("user", "hi"),), stream=True)
    try:
        return "".join([e.text async for e in p.stream(request, CTX) if isinstance(e, TextDelta)])
    except ProviderError as exc:
        return exc


async def burst(p: OpenAIHttpProvider, n: int) -> list[str | ProviderError]:
    try:
        return await asyncio.gather(*(answer(p) for _ in range(n)))
    finally:
        await p.aclose()


def test_a_burst_larger_than_any_default_pool_is_all_answered(upstream: FakeUpstream) -> None:
    # 300 requests at once, each answered after 5 s, with a 9 s first-byte deadline: a pool
    # of 256 connections would make the last 44 wait 5 s for a connection, then 5 s for
    # their answer, and time out. (4 s of slack: 300 connections opening in one test
    # process, beside the suite's other workers, on a busy machine.)
    n = 300
    upstream.script(*[Slow(first_byte_delay_s=5.0)] * n)
    timeouts = Timeouts(connect_ms=9000, first_byte_ms=9000, idle_ms=9000, total_ms=30_000)
    p = provider(upstream.base_url, timeouts, max_concurrent=None)
    results = asyncio.run(burst(p, n))
    failures = [r for r in results if isinstance(r, ProviderError)]
    assert failures == []
    assert results == [DEFAULT_TEXT] * n
    assert p.queued_requests == 0


def test_waiting_for_a_slot_does_not_count_against_first_byte(upstream: FakeUpstream) -> None:
    # One slot; each answer starts 0.3 s after it was sent, against a 0.45 s first-byte
    # deadline. The second request waits ~0.3 s for its slot, ~0.6 s in all: fine.
    upstream.script(*[Slow(first_byte_delay_s=0.3)] * 2)
    timeouts = Timeouts(connect_ms=1000, first_byte_ms=450, idle_ms=1000, total_ms=10_000)
    p = provider(upstream.base_url, timeouts, max_concurrent=1)
    start = time.monotonic()
    results = asyncio.run(burst(p, 2))
    assert results == [DEFAULT_TEXT] * 2
    assert time.monotonic() - start > 0.55  # one after the other
    assert p.queued_requests == 1


def test_a_request_that_never_gets_a_slot_says_so(upstream: FakeUpstream) -> None:
    # The first request holds the only slot for ~1.2 s (its first byte comes at once, then a
    # chunk every 0.4 s); the second gives up after first_byte_ms without being sent.
    upstream.script(Slow(chunk_delay_s=0.4, chunks=3))
    timeouts = Timeouts(connect_ms=1000, first_byte_ms=300, idle_ms=1000, total_ms=10_000)
    p = provider(upstream.base_url, timeouts, max_concurrent=1)
    first, second = asyncio.run(burst(p, 2))
    assert first == DEFAULT_TEXT
    assert isinstance(second, ProviderError)
    assert second.failure is Failure.CONCURRENCY_LIMIT
    assert second.message == (
        "no connection slot free within 300 ms (alpha is at max_concurrent=1); "
        "the request was not sent"
    )
    assert len(upstream.requests) == 1
    assert p.queued_requests == 1
