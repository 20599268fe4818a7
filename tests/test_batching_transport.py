"""The transport uvicorn writes through (olp.server.protocol.BatchingTransport), over a real
loopback connection: what is written arrives whole and in order, and closing sends what
is pending first."""

from __future__ import annotations

import asyncio
import socket

from olp.server.protocol import BatchingTransport


class _Reader(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = b""
        self.closed = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


async def _pair() -> tuple[BatchingTransport, _Reader]:
    """A BatchingTransport writing to a reader on the other end of a loopback socket."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    reader = _Reader()
    await loop.connect_accepted_socket(lambda: reader, theirs)
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
    return BatchingTransport(transport), reader


def test_writes_of_one_turn_and_of_later_turns_arrive_in_order() -> None:
    async def main() -> bytes:
        batching, reader = await _pair()
        batching.write(b"HTTP/1.1 200 OK\r\n\r\n")
        batching.write(b"first")
        assert batching.get_write_buffer_size() >= len(b"HTTP/1.1 200 OK\r\n\r\nfirst")
        await asyncio.sleep(0)
        batching.write(b"-second")
        batching.close()
        await asyncio.wait_for(reader.closed.wait(), 5)
        return reader.data

    assert asyncio.run(main()) == b"HTTP/1.1 200 OK\r\n\r\nfirst-second"


def test_close_sends_what_is_pending_and_abort_drops_it() -> None:
    async def main() -> tuple[bytes, bytes]:
        closing, closed_reader = await _pair()
        closing.write(b"answer")
        closing.close()  # in the same turn as the write
        aborting, aborted_reader = await _pair()
        aborting.write(b"never sent")
        aborting.abort()
        await asyncio.wait_for(closed_reader.closed.wait(), 5)
        await asyncio.wait_for(aborted_reader.closed.wait(), 5)
        assert closing.is_closing() and aborting.is_closing()
        return closed_reader.data, aborted_reader.data

    assert asyncio.run(main()) == (b"answer", b"")
