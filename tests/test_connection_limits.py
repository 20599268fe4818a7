"""Connection limits, from raw sockets against a real `olp start` (olp.server.protocol)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from olp_server import ProcessServer, write_config

REQUEST_LINE = b"POST /v1/chat/completions HTTP/1.1\r\nHost: olp\r\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessServer]:
    home = tmp_path_factory.mktemp("limits") / "home"
    write_config(home, {"server": {"header_timeout_s": 1, "max_header_bytes": 16384}})
    with ProcessServer(home) as running:
        yield running


def _connect(server: ProcessServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def _send_until_refused(sock: socket.socket, line: bytes, most: int) -> int:
    """How many bytes went out before the server closed the connection."""
    sent = 0
    try:
        while sent < most:
            sock.sendall(line)
            sent += len(line)
    except (BrokenPipeError, ConnectionResetError):
        return sent
    raise AssertionError(f"the server read all {most} bytes of headers")


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_headers_over_the_limit_get_a_431_and_the_connection_closes(
    server: ProcessServer,
) -> None:
    with _connect(server) as sock:
        sock.sendall(REQUEST_LINE + b"X-Big: " + b"a" * 20_000 + b"\r\n")
        answer = _read_all(sock)  # the server closes: no more headers are read
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ")
    error = orjson.loads(body)["error"]
    assert error["code"] == "request_header_fields_too_large"
    assert "server.max_header_bytes" in error["message"]


def test_huge_headers_are_not_read_in_full(server: ProcessServer) -> None:
    total = 64 * 1024 * 1024
    with _connect(server) as sock:
        sock.sendall(REQUEST_LINE)
        sent = _send_until_refused(sock, b"X-Big: " + b"a" * 65536 + b"\r\n", total)
    assert sent < total // 4
    # The server is fine.
    assert httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200


@pytest.mark.parametrize("opening", [b"", REQUEST_LINE, REQUEST_LINE[:10]])
def test_a_connection_without_complete_headers_is_closed_after_header_timeout_s(
    server: ProcessServer, opening: bytes
) -> None:
    with _connect(server) as sock:
        started = time.monotonic()
        sock.sendall(opening)
        assert _read_all(sock) == b""  # closed without an answer
        elapsed = time.monotonic() - started
    assert 0.8 < elapsed < 3


def test_a_later_request_whose_headers_stall_is_closed_after_header_timeout_s(
    server: ProcessServer,
) -> None:
    with _connect(server) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        sock.sendall(REQUEST_LINE)  # the next request's head, never finished
        assert _read_all(sock) == b""
        elapsed = time.monotonic() - started
    assert 0.8 < elapsed < 3


@pytest.mark.parametrize("path", [b"/health", b"/v1/models"])
def test_a_client_that_ends_its_side_after_the_request_still_gets_the_answer(
    server: ProcessServer, path: bytes
) -> None:
    # printf 'GET …' | nc -N: the request, then the end of the client's side at once.
    for _ in range(20):
        with _connect(server) as sock:
            sock.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.shutdown(socket.SHUT_WR)
            assert _read_all(sock).startswith(b"HTTP/1.1 "), path


def test_a_complete_request_is_not_cut_by_header_timeout_s(server: ProcessServer) -> None:
    # Keep-alive: two requests on one connection, the second after the first's timeout.
    with httpx.Client(base_url=server.base_url) as client:
        assert client.get("/health").status_code == 200
        time.sleep(1.5)
        assert client.get("/health").status_code == 200


def test_health_answers_through_a_flood_of_idle_connections(tmp_path: Path) -> None:
    # 400 connections that never send a request, against a process that may open 256
    # files: without a bound on them, the next connection is never accepted.
    home = tmp_path / "home"
    write_config(home, {})
    idle: list[socket.socket] = []
    with ProcessServer(home, fd_limit=256) as server:
        try:
            for _ in range(400):
                idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
            for _ in range(3):
                assert httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200
        finally:
            for sock in idle:
                sock.close()
        assert server.proc is not None and server.proc.poll() is None
