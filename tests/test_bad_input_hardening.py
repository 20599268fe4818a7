"""Hostile input over real HTTP: control characters in `model`, deep nesting, wrong methods,
out-of-range numbers. Each gets an OpenAI-shaped 4xx naming the field, before any hop runs."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from olp.server.meta import header_value
from olp.wire.openai_chat._checks import MAX_NESTING

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

AUTH = {"authorization": f"Bearer {OWNER_TOKEN}"}
USER = [{"role": "user", "content": "x"}]


@pytest.fixture
def olp(tmp_path: Path, upstream: FakeUpstream) -> Iterator[ThreadServer]:
    config = {
        "providers": {
            "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
        },
    }
    with olp_server(tmp_path, config) as server:
        yield server


def encode(body: dict[str, Any]) -> bytes:
    # orjson stops at 255 levels, and the json module at the recursion limit.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        return json.dumps(body).encode()
    finally:
        sys.setrecursionlimit(limit)


def post(server: ThreadServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        content=encode(body),
        headers={**AUTH, "content-type": "application/json"},
        timeout=10,
    )


def error_of(resp: httpx.Response) -> dict[str, Any]:
    assert resp.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = resp.json()["error"]
    assert "Traceback" not in error["message"]
    return error


@pytest.mark.parametrize(
    "model", ["m\x00", "m-ok\x01", "m\x7f", "m\x85", "up/m\r\nX-Evil: 1", "up/m\x00"]
)
def test_control_characters_in_model_are_refused_before_any_hop(
    olp: ThreadServer, upstream: FakeUpstream, model: str
) -> None:
    resp = post(olp, {"model": model, "messages": USER})
    assert resp.status_code == 400
    error = error_of(resp)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "model"
    assert error["message"].startswith("model: must not contain control characters")
    assert "x-evil" not in resp.headers
    assert upstream.requests == []


def test_a_model_name_outside_ascii_is_escaped_in_headers(olp: ThreadServer) -> None:
    resp = post(olp, {"model": "up/modèle", "messages": USER})
    assert resp.status_code == 200
    assert resp.headers["x-olp-model-used"] == "mod\\xe8le"


def test_header_values_escape_everything_but_printable_ascii() -> None:
    assert header_value("ok value") == b"ok value"
    assert header_value("a\r\nX-Evil: 1") == b"a\\x0d\\x0aX-Evil: 1"
    assert header_value("\x00\x1f\x7fé€") == b"\\x00\\x1f\\x7f\\xe9\\u20ac"


def nested(depth: int) -> dict[str, Any]:
    """An object `depth` levels of objects deep."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"p": value}
    return value


def tool(parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


def schema(body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": body}}


@pytest.mark.parametrize(
    ("field", "param"),
    [
        ({"tools": tool(nested(300))}, "tools[0].function.parameters"),
        ({"response_format": schema(nested(400))}, "response_format.json_schema.schema"),
        ({"tools": tool(nested(MAX_NESTING + 1))}, "tools[0].function.parameters"),
        ({"metadata": nested(1000)}, "metadata"),
        (
            {
                "messages": [
                    *USER,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": nested(300)},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "r"},
                ]
            },
            "messages[1].tool_calls[0].function.arguments",
        ),
    ],
)
def test_deep_nesting_is_a_400_naming_the_field(
    olp: ThreadServer, upstream: FakeUpstream, field: dict[str, Any], param: str
) -> None:
    resp = post(olp, {"model": "m", "messages": USER, **field})
    assert resp.status_code == 400
    error = error_of(resp)
    assert error["param"] == param
    assert f"nested too deeply (more than {MAX_NESTING} levels" in error["message"]
    assert upstream.requests == []


def test_the_deepest_accepted_nesting_goes_through_every_stage(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    # Parsed, keyed for the cache, sent upstream, answered, and then a cache hit.
    body = {
        "model": "m",
        "temperature": 0,
        "messages": USER,
        "tools": tool(nested(MAX_NESTING)),
        "response_format": schema(nested(MAX_NESTING)),
    }
    first, second = post(olp, body), post(olp, body)
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.headers["x-olp-cache"] == "hit"
    assert len(upstream.requests) == 1


def test_a_wrong_method_names_the_allowed_ones(olp: ThreadServer) -> None:
    resp = httpx.get(f"{olp.base_url}/v1/chat/completions", headers=AUTH)
    assert resp.status_code == 405
    assert resp.headers["allow"] == "POST"
    resp = httpx.delete(f"{olp.base_url}/v1/models", headers=AUTH)
    assert resp.status_code == 405
    assert resp.headers["allow"] == "GET"


@pytest.mark.parametrize(
    ("seed", "shown"), [(2**64, "18446744073709551616"), (2**63, "9223372036854775808")]
)
def test_a_seed_out_of_range_says_the_range(olp: ThreadServer, seed: int, shown: str) -> None:
    # Beyond 64 bits, as a client's JSON encoder may write it.
    body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "seed": %d}' % seed
    resp = httpx.post(
        f"{olp.base_url}/v1/chat/completions",
        content=body,
        headers={**AUTH, "content-type": "application/json"},
    )
    assert resp.status_code == 400
    error = error_of(resp)
    assert error["param"] == "seed"
    assert error["message"] == (
        "seed: must be an integer between -9223372036854775808 and 9223372036854775807 "
        f"(got {shown})"
    )


def test_a_seed_at_the_edge_of_the_range_is_accepted(olp: ThreadServer) -> None:
    resp = post(olp, {"model": "m", "messages": USER, "seed": -(2**63)})
    assert resp.status_code == 200


def test_control_characters_over_a_raw_socket_get_a_response(olp: ThreadServer) -> None:
    # What the probe saw: the server dropped the connection without any response.
    body = b'{"model": "m-ok\\u0000", "messages": [{"role": "user", "content": "x"}]}'
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OWNER_TOKEN}"
        f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", olp.port), timeout=10) as sock:
        sock.sendall(head + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b'"param":"model"' in answer
