"""Incremental Server-Sent-Events decoder for upstream byte streams.

Follows the WHATWG event-stream rules that matter for LLM APIs: lines end in LF, CRLF or a
lone CR; `data:` lines accumulate and are joined with LF; a blank line dispatches the
message; lines starting with `:` are comments (keepalives); one space after the colon is
dropped; `id:` and `retry:` are read and ignored. Chunks may split the stream anywhere,
including inside a UTF-8 character or between the CR and LF of one line ending: bytes
are only decoded once a whole line is known, and line endings are ASCII, so a line never
ends inside a character.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEDecoder", "SSEMessage"]

_CR = 0x0D
_LF = 0x0A
_COLON = 0x3A


@dataclass(frozen=True, slots=True)
class SSEMessage:
    """One dispatched message: its `event:` type (None when absent) and its joined data."""

    event: str | None
    data: str


class SSEDecoder:
    """Feed it bytes as they arrive; it returns the messages each chunk completed.

    A line longer than `max_line_bytes` (its ending excluded) raises `ValueError`: an
    upstream that never ends a line would otherwise grow the buffer without bound. After
    that error the stream is unusable; the decoder is reset and the caller should stop.
    """

    __slots__ = ("_data", "_event", "_max", "_skip_lf", "_started", "_tail")

    def __init__(self, max_line_bytes: int = 1_048_576) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be at least 1")
        self._max = max_line_bytes
        # Bytes of the line still being received (no line ending seen yet).
        self._tail = bytearray()
        # The previous chunk ended in CR: an LF starting the next chunk belongs to it.
        self._skip_lf = False
        # Whether the first line was seen (a UTF-8 BOM may precede it).
        self._started = False
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SSEMessage]:
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == _LF:
                chunk = chunk[1:]
                if not chunk:
                    return []
        if _LF not in chunk and _CR not in chunk:
            # Common for large events split across reads: no line ends here, so avoid
            # re-scanning the pending bytes.
            self._tail += chunk
            self._check_length(len(self._tail))
            return []
        if self._tail:
            self._tail += chunk
            data = bytes(self._tail)
            self._tail.clear()
        else:
            data = chunk
        # Without keepends a blank line stays an empty item; whether the last item is a
        # whole line is told by the last byte of the data.
        lines = data.splitlines()
        last_byte = data[-1]
        if last_byte != _LF and last_byte != _CR:
            self._tail += lines.pop()
            self._check_length(len(self._tail))
        elif last_byte == _CR:
            self._skip_lf = True
        if len(data) > self._max:
            for line in lines:
                self._check_length(len(line))
        out: list[SSEMessage] = []
        for line in lines:
            self._line(line, out)
        return out

    def flush(self) -> list[SSEMessage]:
        """End of stream: the unterminated last line and a message without a blank line."""
        out: list[SSEMessage] = []
        if self._tail:
            line = bytes(self._tail)
            self._tail.clear()
            self._line(line, out)
        self._dispatch(out)
        self._skip_lf = False
        return out

    def _check_length(self, size: int) -> None:
        if size > self._max:
            self._reset()
            raise ValueError(
                f"SSE line longer than {self._max} bytes without a line ending; "
                "the upstream stream is malformed or not an event stream"
            )

    def _reset(self) -> None:
        self._tail.clear()
        self._skip_lf = False
        self._event = None
        self._data = []

    def _line(self, raw: bytes, out: list[SSEMessage]) -> None:
        if not self._started:
            self._started = True
            if raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
        if not raw:
            self._dispatch(out)
            return
        if raw[0] == _COLON:
            return
        # Field names are ASCII, so splitting the bytes at the first colon never cuts a
        # character; only the value needs decoding.
        colon = raw.find(b":")
        if colon < 0:
            name, value = raw, b""
        else:
            name, value = raw[:colon], raw[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            # An empty type means the default one, which callers see as None.
            self._event = value.decode("utf-8", "replace") or None
        # `id` and `retry` drive browser reconnection, which OLP never does.

    def _dispatch(self, out: list[SSEMessage]) -> None:
        # Per the spec, a message without any data line is dropped, its event type too.
        if self._data:
            out.append(SSEMessage(self._event, "\n".join(self._data)))
            self._data = []
        self._event = None
