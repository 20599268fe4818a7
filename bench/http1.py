"""Just enough HTTP/1.1 to know where a response ends, at a few microseconds a response.

The load generator reuses one connection for request after request, so it must find the end
of each response exactly: by Content-Length or by chunked framing. It never decodes the
body. Anything it does not expect (a closing server, trailing bytes) is a ProtocolError,
which the run counts as an error.
"""

from __future__ import annotations

from typing import Final

_HEAD: Final = 0
_LENGTH: Final = 1
_CHUNK_SIZE: Final = 2
_CHUNK_DATA: Final = 3
_TRAILER: Final = 4
_DONE: Final = 5

_MAX_HEAD = 64 * 1024


class ProtocolError(Exception):
    """The response cannot be framed, or the connection cannot carry another request."""


class ResponseParser:
    """Incremental parser for one response at a time; reset() before the next request."""

    __slots__ = ("_buf", "_left", "_state", "status")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.status = 0
        self._state = _HEAD
        self._buf = b""
        self._left = 0

    def feed(self, data: bytes) -> bool:
        """Take the next bytes from the socket; True once the response is complete."""
        if self._state == _HEAD:
            buf = self._buf + data if self._buf else data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise ProtocolError("response head too large")
                self._buf = buf
                return False
            self._buf = b""
            self._parse_head(buf[:end])
            data = buf[end + 4 :]
        if self._state == _LENGTH:
            self._left -= len(data)
            if self._left > 0:
                return False
            if self._left < 0:
                raise ProtocolError("bytes after the response body")
            self._state = _DONE
            return True
        if self._state == _DONE:
            if data:
                raise ProtocolError("bytes after the response body")
            return True
        return self._feed_chunked(data)

    def _parse_head(self, head: bytes) -> None:
        if not head.startswith(b"HTTP/1.1 "):
            raise ProtocolError(f"not an HTTP/1.1 response: {head[:20]!r}")
        try:
            self.status = int(head[9:12])
        except ValueError:
            raise ProtocolError(f"bad status line: {head[:40]!r}") from None
        lower = head.lower()
        if b"\r\nconnection: close" in lower:
            raise ProtocolError("server closes the connection (no keep-alive)")
        if self.status in (204, 304) or 100 <= self.status < 200:
            if self.status < 200:
                raise ProtocolError("interim 1xx responses are not expected")
            self._state = _DONE
            return
        at = lower.find(b"\r\ncontent-length:")
        if at >= 0:
            eol = lower.find(b"\r\n", at + 2)
            value = lower[at + 17 : eol if eol >= 0 else len(lower)]
            try:
                self._left = int(value)
            except ValueError:
                raise ProtocolError(f"bad content-length: {value!r}") from None
            self._state = _LENGTH
        elif b"\r\ntransfer-encoding: chunked" in lower:
            self._state = _CHUNK_SIZE
        else:
            raise ProtocolError("response has neither content-length nor chunked encoding")

    def _feed_chunked(self, data: bytes) -> bool:
        if self._buf:
            data = self._buf + data
            self._buf = b""
        pos = 0
        end = len(data)
        while True:
            if self._state == _CHUNK_DATA:
                # _left counts the chunk's bytes plus its closing CRLF.
                avail = end - pos
                if avail < self._left:
                    self._left -= avail
                    return False
                pos += self._left
                self._left = 0
                self._state = _CHUNK_SIZE
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                self._buf = data[pos:]
                return False
            if self._state == _TRAILER:
                if eol == pos:  # the empty line that ends the message
                    if eol + 2 != end:
                        raise ProtocolError("bytes after the response body")
                    self._state = _DONE
                    return True
                pos = eol + 2  # a trailer field: skip it
                continue
            try:
                size = int(data[pos:eol].split(b";", 1)[0], 16)
            except ValueError:
                raise ProtocolError(f"bad chunk size: {data[pos:eol][:20]!r}") from None
            pos = eol + 2
            if size == 0:
                self._state = _TRAILER
            else:
                self._left = size + 2
                self._state = _CHUNK_DATA
