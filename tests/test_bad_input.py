"""Every bad input gets the documented status and a message that names the problem."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import CHAT_REQUESTS, FUZZ, dumps, mutations

from fakes.upstream import FakeUpstream, Slow
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

AUTH = {"authorization": f"Bearer {OWNER_TOKEN}"}
# One server for all examples (each is a real request): fewer of them, and no health check
# against the function-scoped server fixture.
FUZZ_HTTP = settings(
    FUZZ,
    max_examples=min(FUZZ.max_examples, 60),
    suppress_health_check=[*FUZZ.suppress_health_check, HealthCheck.function_scoped_fixture],
)


@pytest.fixture
def olp(tmp_path: Path, upstream: FakeUpstream) -> Iterator[ThreadServer]:
    config = {
        "server": {"max_body_bytes": 4096},
        "providers": {
            "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
        },
    }
    with olp_server(tmp_path, config) as server:
        yield server


def post(
    server: ThreadServer,
    content: bytes | None = None,
    *,
    json: Any = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=content,
        json=json,
        headers=headers if headers is not None else {**AUTH, "content-type": "application/json"},
        timeout=10,
    )


def error_of(resp: httpx.Response) -> dict[str, Any]:
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"}
    assert {"message", "type", "code", "param"} <= set(body["error"])
    assert "Traceback" not in body["error"]["message"]
    result: dict[str, Any] = body["error"]
    return result


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        (b"{not json", None, "Invalid JSON"),
        (b"[1, 2]", None, "JSON object"),
        (b'{"messages": [{"role": "user", "content": "x"}]}', "model", "model"),
        (b'{"model": "m"}', "messages", "messages"),
        (b'{"model": "m", "messages": []}', "messages", "messages"),
        (
            b'{"model": "m", "messages": [{"role": "wizard", "content": "x"}]}',
            "messages[0].role",
            "role",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": 5}]}',
            "messages[0].content",
            "content",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
            "temperature",
            "temperature",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": true}',
            "max_tokens",
            "max_tokens",
        ),
        (b'{"model": 7, "messages": [{"role": "user", "content": "x"}]}', "model", "model"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
            "stream",
            "stream",
        ),
    ],
)
def test_invalid_body_is_400_naming_the_field(
    olp: ThreadServer, upstream: FakeUpstream, body: bytes, param: str | None, fragment: str
) -> None:
    resp = post(olp, body)
    assert resp.status_code == 400
    err = error_of(resp)
    assert err["type"] == "invalid_request_error"
    assert fragment in err["message"]
    if param is not None:
        assert err["param"] == param
    assert upstream.calls == 0


def test_body_over_the_limit_is_413(olp: ThreadServer) -> None:
    big = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * 5000 + b'"}]}'
    resp = post(olp, big)
    assert resp.status_code == 413
    err = error_of(resp)
    assert err["code"] == "request_too_large"
    assert "4096" in err["message"]


def test_chunked_body_over_the_limit_is_413(olp: ThreadServer) -> None:
    def pieces() -> Iterator[bytes]:
        for _ in range(10):
            yield b"x" * 1000

    resp = httpx.post(
        f"{olp.base_url}/v1/chat/completions",
        content=pieces(),
        headers={**AUTH, "content-type": "application/json"},
    )
    assert resp.status_code == 413


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_wrong_content_type_is_415(olp: ThreadServer, content_type: str) -> None:
    headers = {**AUTH, "content-type": content_type} if content_type else dict(AUTH)
    resp = post(olp, b'{"model": "m", "messages": []}', headers=headers)
    assert resp.status_code == 415
    err = error_of(resp)
    assert err["code"] == "unsupported_media_type"
    assert "-H 'Content-Type: application/json'" in err["message"]  # how to fix it


def test_unknown_model_is_404(olp: ThreadServer) -> None:
    resp = post(olp, json={"model": "nope", "messages": [{"role": "user", "content": "x"}]})
    assert resp.status_code == 404
    err = error_of(resp)
    assert err["code"] == "model_not_found"
    assert "nope" in err["message"]
    assert err["param"] == "model"


def test_missing_token_is_401(olp: ThreadServer) -> None:
    resp = post(olp, json={"model": "m", "messages": []}, headers={})
    assert resp.status_code == 401
    err = error_of(resp)
    assert err["code"] == "auth_required"
    assert "Authorization: Bearer" in err["message"]
    assert resp.headers["x-olp-provider-used"] == "none"


@pytest.mark.parametrize(
    "headers",
    [{"authorization": "Bearer wrong"}, {"x-api-key": "wrong"}, {"authorization": "Basic abc"}],
)
def test_bad_token_is_401(olp: ThreadServer, headers: dict[str, str]) -> None:
    resp = post(olp, json={"model": "m", "messages": []}, headers=headers)
    assert resp.status_code == 401
    assert error_of(resp)["code"] in ("invalid_api_key", "auth_required")


def test_x_api_key_works(olp: ThreadServer) -> None:
    resp = post(
        olp,
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        headers={"x-api-key": OWNER_TOKEN},
    )
    assert resp.status_code == 200


def test_unknown_route_and_method(olp: ThreadServer) -> None:
    resp = httpx.get(f"{olp.base_url}/v2/nothing")
    assert resp.status_code == 404
    assert "not found" in error_of(resp)["message"]
    resp = httpx.get(f"{olp.base_url}/v1/chat/completions", headers=AUTH)
    assert resp.status_code == 405
    assert "POST" in error_of(resp)["message"]


def test_health_is_public_and_owner_gets_detail(olp: ThreadServer) -> None:
    public = httpx.get(f"{olp.base_url}/health").json()
    assert public["ok"] is True and "version" in public and "providers" not in public
    owner = httpx.get(f"{olp.base_url}/health", headers=AUTH).json()
    assert owner["providers"]["up"]["state"] == "ok"


def test_anonymous_allowed_by_config(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = {
        "auth": {"allow_anonymous": True},
        "providers": {
            "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
        },
    }
    with olp_server(tmp_path, config) as server:
        resp = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
    assert resp.status_code == 200


# OLP's own protocol tells the app of the disconnect directly; under stock uvicorn
# protocols the app learns it from `receive()`. Both must stop the upstream.
@pytest.mark.parametrize("http", ["olp", "httptools", "h11"])
def test_client_disconnect_cancels_the_upstream(
    tmp_path: Path, upstream: FakeUpstream, http: str
) -> None:
    upstream.script(Slow(first_byte_delay_s=0.0, chunk_delay_s=0.5))
    up = {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
    config = {"providers": {"up": up}}
    options = {} if http == "olp" else {"http": http}
    with olp_server(tmp_path, config, uvicorn_options=options) as olp:
        _disconnect_mid_stream(olp)
    assert upstream.wait_for(lambda: len(upstream.disconnects) == 1, timeout=5)


def _disconnect_mid_stream(olp: ThreadServer) -> None:
    body = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]}'
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
        f"authorization: Bearer {OWNER_TOKEN}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection(("127.0.0.1", olp.port)) as sock:
        sock.sendall(request)
        assert b"200 OK" in sock.recv(65536)  # headers (and maybe the first frame)


def test_slow_client_body_does_not_block_others(olp: ThreadServer) -> None:
    """A client that sends half a body and stalls holds only its own connection."""
    with socket.create_connection(("127.0.0.1", olp.port)) as stalled:
        stalled.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
            b"content-type: application/json\r\ncontent-length: 100\r\n"
            b"authorization: Bearer " + OWNER_TOKEN.encode() + b"\r\n\r\n{"
        )
        started = time.perf_counter()
        resp = post(olp, json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
        assert resp.status_code == 200
        assert time.perf_counter() - started < 5


def test_stalled_body_gets_408(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = {
        "server": {"body_timeout_s": 0.3},
        "providers": {"up": {"type": "openai-http", "base_url": upstream.openai_base_url}},
    }
    with (
        olp_server(tmp_path, config) as server,
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.settimeout(5)
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
            b"content-type: application/json\r\ncontent-length: 100\r\n"
            b"authorization: Bearer " + OWNER_TOKEN.encode() + b"\r\n\r\n{"
        )
        reply = _until_body(sock)
    assert reply.startswith(b"HTTP/1.1 408")
    assert b"request_timeout" in reply


def _until_body(sock: socket.socket) -> bytes:
    """An HTTP answer's head and its whole body (the head and body may arrive apart)."""
    reply = b""
    while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < _length(reply):
        chunk = sock.recv(65536)
        if not chunk:
            break
        reply += chunk
    return reply


def _length(reply: bytes) -> int:
    for line in reply.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def test_any_body_gets_an_answer_or_a_named_error(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    """Whatever the body, over real HTTP: an answer, or an OpenAI-shaped error with its
    documented status; never a 500, a traceback or a hang."""

    valid = st.sampled_from(CHAT_REQUESTS).map(dumps)
    almost = mutations(CHAT_REQUESTS).map(dumps)

    @FUZZ_HTTP
    @given(st.one_of(valid, almost, almost, st.binary(max_size=200)))
    def run(body: bytes) -> None:
        resp = post(olp, body)
        if resp.status_code == 200:
            text = resp.text
            assert text.startswith(("{", "data: ")), text[:200]
            return
        assert resp.status_code in (400, 404, 413), resp.text[:300]
        error_of(resp)

    run()
    assert upstream.calls > 0  # the valid ones went all the way
