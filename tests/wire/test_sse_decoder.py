"""The upstream SSE decoder: framing rules, and chunk boundaries anywhere."""

from __future__ import annotations

import pytest

from olp.wire.sse import SSEDecoder, SSEMessage


def decode_all(*chunks: bytes, max_line_bytes: int = 1_048_576) -> list[SSEMessage]:
    decoder = SSEDecoder(max_line_bytes)
    out: list[SSEMessage] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    out.extend(decoder.flush())
    return out


# A stream exercising every rule at once: CRLF, lone CR, comments, multi-line data,
# event types, multi-byte UTF-8 (2, 3 and 4 bytes), a field without a colon.
MIXED = (
    b": comment first\r\n"
    b"event: message_start\r\n"
    b'data: {"type":"message_start"}\r\n'
    b"\r\n"
    b"data: caf\xc3\xa9 \xe6\xbc\xa2\xe5\xad\x97\n"
    b"data: \xf0\x9f\x98\x80 second line\n"
    b"\n"
    b": keepalive\r"
    b"data:no space\r"
    b"\r"
    b"data\n"
    b"\n"
    b"event: ping\n"
    b"id: 7\n"
    b"retry: 1000\n"
    b"data: {}\n"
    b"\n"
    b"data: [DONE]\n\n"
)
MIXED_EXPECTED = [
    SSEMessage("message_start", '{"type":"message_start"}'),
    SSEMessage(None, "café 漢字\n😀 second line"),
    SSEMessage(None, "no space"),
    SSEMessage(None, ""),
    SSEMessage("ping", "{}"),
    SSEMessage(None, "[DONE]"),
]


def test_mixed_stream_in_one_chunk() -> None:
    assert decode_all(MIXED) == MIXED_EXPECTED


def test_split_at_every_position() -> None:
    for cut in range(len(MIXED) + 1):
        assert decode_all(MIXED[:cut], MIXED[cut:]) == MIXED_EXPECTED, f"cut at {cut}"


def test_split_at_every_pair_of_positions() -> None:
    n = len(MIXED)
    for a in range(n + 1):
        for b in range(a, n + 1):
            got = decode_all(MIXED[:a], MIXED[a:b], MIXED[b:])
            assert got == MIXED_EXPECTED, f"cuts at {a}, {b}"


def test_one_byte_at_a_time() -> None:
    chunks = [MIXED[i : i + 1] for i in range(len(MIXED))]
    assert decode_all(*chunks) == MIXED_EXPECTED


def test_messages_are_returned_by_the_feed_that_completes_them() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\n") == [SSEMessage(None, "a")]
    assert decoder.feed(b"data: b\n\ndata: c\n\nda") == [
        SSEMessage(None, "b"),
        SSEMessage(None, "c"),
    ]
    assert decoder.feed(b"ta: d\n\n") == [SSEMessage(None, "d")]


def test_crlf_split_between_cr_and_lf_is_one_line_ending() -> None:
    # If the LF after a chunk-final CR were read as a second line ending, "a" would be
    # dispatched alone and "b" would be a separate message.
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r") == []
    assert decoder.feed(b"\n") == []
    # A CR alone already ends the (blank) line; the LF that follows is its partner.
    assert decoder.feed(b"\r") == [SSEMessage(None, "a\nb")]
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"data: c\n\n") == [SSEMessage(None, "c")]


def test_lone_cr_then_empty_chunk_keeps_pending_lf_rule() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\n\n") == [SSEMessage(None, "a")]


def test_only_one_leading_space_is_removed() -> None:
    assert decode_all(b"data:  two spaces\n\n") == [SSEMessage(None, " two spaces")]
    assert decode_all(b"data:x\n\n") == [SSEMessage(None, "x")]


def test_colons_after_the_first_belong_to_the_value() -> None:
    assert decode_all(b"data: a: b:c\n\n") == [SSEMessage(None, "a: b:c")]


def test_event_without_data_is_not_dispatched() -> None:
    assert decode_all(b"event: ping\n\ndata: x\n\n") == [SSEMessage(None, "x")]


def test_event_type_does_not_leak_into_the_next_message() -> None:
    got = decode_all(b"event: a\ndata: 1\n\ndata: 2\n\n")
    assert got == [SSEMessage("a", "1"), SSEMessage(None, "2")]


def test_empty_event_type_means_default() -> None:
    assert decode_all(b"event:\ndata: x\n\n") == [SSEMessage(None, "x")]


def test_unknown_fields_and_comments_are_ignored() -> None:
    got = decode_all(b":c\nfoo: bar\ndata: x\n: another\nid: 1\n\n")
    assert got == [SSEMessage(None, "x")]


def test_leading_bom_is_stripped_once() -> None:
    assert decode_all(b"\xef\xbb\xbfdata: x\n\n") == [SSEMessage(None, "x")]
    # Split inside the BOM itself.
    assert decode_all(b"\xef", b"\xbb\xbfdata: y\n\n") == [SSEMessage(None, "y")]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert decode_all(b"data: a\xffb\n\n") == [SSEMessage(None, "a\ufffdb")]


def test_flush_dispatches_a_final_message_without_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: one\n\ndata: two\n") == [SSEMessage(None, "one")]
    assert decoder.flush() == [SSEMessage(None, "two")]
    assert decoder.flush() == []


def test_flush_dispatches_an_unterminated_last_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'event: end\ndata: {"x": 1}') == []
    assert decoder.flush() == [SSEMessage("end", '{"x": 1}')]


def test_flush_of_an_empty_stream_is_empty() -> None:
    assert SSEDecoder().flush() == []


def test_line_at_the_limit_is_accepted() -> None:
    line = b"data: " + b"x" * 94  # exactly 100 bytes without its ending
    assert decode_all(line + b"\n\n", max_line_bytes=100) == [SSEMessage(None, "x" * 94)]


def test_long_line_in_one_chunk_raises() -> None:
    decoder = SSEDecoder(max_line_bytes=100)
    with pytest.raises(ValueError, match="longer than 100 bytes"):
        decoder.feed(b"data: " + b"x" * 95 + b"\n\n")


def test_long_line_without_ending_raises_before_the_end_arrives() -> None:
    decoder = SSEDecoder(max_line_bytes=100)
    assert decoder.feed(b"data: " + b"x" * 50) == []
    for _ in range(4):
        assert decoder.feed(b"x" * 10) == []  # 96 bytes pending: still within the limit
    with pytest.raises(ValueError, match="longer than 100 bytes"):
        decoder.feed(b"x" * 10)


def test_long_unterminated_tail_in_a_multi_line_chunk_raises() -> None:
    decoder = SSEDecoder(max_line_bytes=100)
    with pytest.raises(ValueError, match="SSE line"):
        decoder.feed(b"data: ok\n\ndata: " + b"y" * 200)


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_line_bytes"):
        SSEDecoder(0)


def test_openai_style_stream_with_arbitrary_reads() -> None:
    frames = [b'{"choices":[{"delta":{"content":"%d"}}]}' % i for i in range(50)]
    stream = b"".join(b"data: " + f + b"\n\n" for f in frames) + b"data: [DONE]\n\n"
    for size in (1, 3, 7, 64, 1000):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        got = decode_all(*chunks)
        assert [m.data.encode() for m in got] == [*frames, b"[DONE]"]
        assert all(m.event is None for m in got)
