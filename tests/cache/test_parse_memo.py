"""The parse memo in front of the cache: same bytes, same request and fingerprint, bounded."""

from __future__ import annotations

import orjson
import pytest

from olp.cache import request_fingerprint
from olp.errors import InvalidRequest
from olp.server.parse_memo import ParsedBody, ParseMemo
from olp.wire.openai_chat import parse_chat_request


def body(text: str, **extra: object) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": text}], **extra})


def parse_and_keep(memo: ParseMemo, raw: bytes) -> ParsedBody:
    """What the chat handler does for a request answered from the cache."""
    parsed = memo.parse(raw)
    memo.keep(raw, parsed)
    return parsed


def test_a_kept_body_is_recalled_not_parsed_again() -> None:
    memo = ParseMemo()
    raw = body("hi", temperature=0.2)
    first = parse_and_keep(memo, raw)
    again = memo.parse(bytes(raw))  # equal bytes, another object: as from the socket
    assert again is first
    assert first.request == parse_chat_request(raw)
    assert first.fingerprint == request_fingerprint(first.request)
    assert first.last_hit is None  # the chat handler fills it in


def test_a_body_not_kept_is_parsed_every_time() -> None:
    memo = ParseMemo()
    raw = body("once")
    first = memo.parse(raw)
    assert memo.parse(raw) is not first
    assert memo.parse(raw).request == first.request
    assert memo.parse(raw).fingerprint == first.fingerprint
    assert len(memo) == 0


def test_keeping_a_kept_body_again_changes_nothing() -> None:
    memo = ParseMemo()
    raw = body("twice")
    first = parse_and_keep(memo, raw)
    memo.keep(raw, memo.parse(raw))
    assert len(memo) == 1
    assert memo.parse(raw) is first


def test_different_bodies_are_different_entries() -> None:
    memo = ParseMemo()
    a, b = parse_and_keep(memo, body("a")), parse_and_keep(memo, body("b"))
    assert a.fingerprint != b.fingerprint
    assert len(memo) == 2


def test_oldest_entries_leave_first() -> None:
    memo = ParseMemo(entries=3)
    first = parse_and_keep(memo, body("0"))
    for i in range(1, 4):
        parse_and_keep(memo, body(str(i)))
    assert len(memo) == 3
    assert memo.parse(body("0")) is not first  # evicted, parsed afresh
    assert memo.parse(body("3")) is memo.parse(body("3"))


def test_large_bodies_are_not_kept() -> None:
    memo = ParseMemo(max_body_bytes=100)
    parse_and_keep(memo, body("x" * 200))
    assert len(memo) == 0


def test_invalid_bodies_raise_every_time_and_are_not_kept() -> None:
    memo = ParseMemo()
    for _ in range(2):
        with pytest.raises(InvalidRequest, match="Invalid JSON"):
            memo.parse(b"{nope")
    assert len(memo) == 0


def test_the_bodies_kept_stay_under_the_byte_budget() -> None:
    memo = ParseMemo(max_body_bytes=1000, max_total_bytes=1000)
    bodies = [body(str(i) * 300) for i in range(10)]  # each about 350 bytes
    for raw in bodies:
        parse_and_keep(memo, raw)
    assert len(memo) == 2  # 3 would be over 1000 bytes
    assert memo.parse(bodies[-1]) is memo.parse(bodies[-1])  # the newest are the ones kept
