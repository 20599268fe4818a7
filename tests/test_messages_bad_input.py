"""`/v1/messages` and its count_tokens under bad input: an Anthropic-shaped error with the
documented status that names the problem, never a 500, a traceback or a dropped line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import FUZZ, MESSAGES_REQUESTS, dumps, json_values, mutations
from olp.errors import InvalidRequest
from olp.ir import ChatRequest
from olp.wire.anthropic_messages import estimate_input_tokens, parse_messages_request

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

HEADERS = {"x-api-key": OWNER_TOKEN, "content-type": "application/json"}
FUZZ_HTTP = settings(
    FUZZ,
    max_examples=min(FUZZ.max_examples, 60),
    suppress_health_check=[*FUZZ.suppress_health_check, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(params=["anthropic-http", "openai-http"])
def olp(
    tmp_path: Path, upstream: FakeUpstream, request: pytest.FixtureRequest
) -> Iterator[ThreadServer]:
    kind = str(request.param)
    base = upstream.base_url if kind == "anthropic-http" else upstream.openai_base_url
    config = {
        "server": {"max_body_bytes": 32768},
        "providers": {"up": {"type": kind, "base_url": base, "models": ["m"]}},
    }
    with olp_server(tmp_path, config) as server:
        yield server


def post(server: ThreadServer, body: bytes, path: str = "/v1/messages") -> httpx.Response:
    return httpx.post(f"{server.base_url}{path}", content=body, headers=HEADERS, timeout=10)


def error_of(resp: httpx.Response) -> dict[str, Any]:
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert body["type"] == "error" and set(body) == {"type", "error"}
    assert {"type", "message"} <= set(body["error"])
    assert "Traceback" not in body["error"]["message"]
    result: dict[str, Any] = body["error"]
    return result


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "Invalid JSON"),
        (b"[1]", "JSON object"),
        (b'{"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}', "model:"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}', "max_tokens:"),
        (b'{"model": "m", "max_tokens": 5, "messages": []}', "messages:"),
        (
            b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": 5}]}',
            "messages[0].content:",
        ),
        (
            b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": '
            b'[{"type": "document", "source": {}}]}]}',
            "messages[0].content[0].type: OLP accepts text, image and tool_result",
        ),
        (
            b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],'
            b' "tools": [{"type": "web_search_20250305", "name": "web_search"}]}',
            "tools[0].type: only client tools",
        ),
        (
            b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],'
            b' "tool_choice": {"type": "tool", "name": "nope"}}',
            "tool_choice.name",
        ),
    ],
)
def test_invalid_body_is_400_naming_the_field(
    olp: ThreadServer, body: bytes, fragment: str
) -> None:
    resp = post(olp, body)
    assert resp.status_code == 400, resp.text
    error = error_of(resp)
    assert error["type"] == "invalid_request_error"
    assert fragment in error["message"]
    assert resp.headers["x-olp-request-id"]


def test_count_tokens_refuses_what_create_refuses(olp: ThreadServer) -> None:
    resp = post(olp, b'{"model": "m", "messages": "hi"}', "/v1/messages/count_tokens")
    assert resp.status_code == 400
    assert error_of(resp)["message"].startswith("messages:")


def test_body_over_the_limit_is_413(olp: ThreadServer) -> None:
    resp = post(olp, dumps({**MESSAGES_REQUESTS[0], "system": "x" * 40_000}))
    assert resp.status_code == 413
    assert error_of(resp)["type"] == "request_too_large"


def test_wrong_content_type_is_415(olp: ThreadServer) -> None:
    resp = httpx.post(
        f"{olp.base_url}/v1/messages",
        content=dumps(MESSAGES_REQUESTS[0]),
        headers={"x-api-key": OWNER_TOKEN, "content-type": "text/plain"},
    )
    assert resp.status_code == 415
    assert "Content-Type" in error_of(resp)["message"]


def test_any_body_gets_an_answer_or_a_named_error(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    """Whatever the body, on both routes and over both kinds of hop: an answer, or an
    Anthropic-shaped error with its documented status."""
    valid = st.sampled_from(MESSAGES_REQUESTS).map(dumps)
    almost = mutations(MESSAGES_REQUESTS).map(dumps)
    paths = st.sampled_from(["/v1/messages", "/v1/messages/count_tokens"])

    @FUZZ_HTTP
    @given(st.one_of(valid, almost, almost, st.binary(max_size=200)), paths)
    def run(body: bytes, path: str) -> None:
        resp = post(olp, body, path)
        if resp.status_code == 200:
            assert resp.text.startswith(("{", "event: ")), resp.text[:200]
            if resp.text.startswith("event: "):
                assert resp.text.rstrip().endswith('data: {"type":"message_stop"}'), resp.text
            return
        assert resp.status_code in (400, 404, 413), resp.text[:300]
        error_of(resp)

    run()
    assert upstream.calls > 0  # the valid ones went all the way


@FUZZ
@given(st.one_of(mutations(MESSAGES_REQUESTS), json_values), st.booleans())
def test_the_parser_raises_only_invalid_request(doc: Any, counting: bool) -> None:
    try:
        request = parse_messages_request(dumps(doc), counting=counting)
    except InvalidRequest:
        return  # (any other exception fails the test)
    assert isinstance(request, ChatRequest)
    assert estimate_input_tokens(request) >= 0


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("where", "doc"),
    [
        (
            "messages[0].content[0].input",
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "tool_use", "id": "t", "name": "f", "input": nested(300)}
                        ],
                    }
                ]
            },
        ),
        (
            "tools[0].input_schema",
            {"tools": [{"name": "f", "input_schema": nested(300)}]},
        ),
        ("context_management", {"context_management": nested(300)}),
    ],
)
def test_deep_nesting_is_refused_by_name(olp: ThreadServer, where: str, doc: Any) -> None:
    body = {**MESSAGES_REQUESTS[0], **doc}
    resp = httpx.post(
        f"{olp.base_url}/v1/messages",
        content=dumps(body),
        headers=HEADERS,
        timeout=10,
    )
    assert resp.status_code == 400, resp.text
    assert error_of(resp)["message"].startswith(f"{where}: nested too deeply")


def test_control_characters_in_the_model_are_refused(olp: ThreadServer) -> None:
    resp = post(olp, dumps({**MESSAGES_REQUESTS[0], "model": "m\r\nX-Evil: 1"}))
    assert resp.status_code == 400
    assert "control characters" in error_of(resp)["message"]


def test_a_deep_cache_control_is_refused_by_name(olp: ThreadServer) -> None:
    system = [{"type": "text", "text": "hi", "cache_control": nested(300)}]
    resp = post(olp, dumps({**MESSAGES_REQUESTS[0], "system": system}))
    assert resp.status_code == 400
    assert error_of(resp)["message"].startswith("system[0].cache_control: nested too deeply")


def test_wrong_method_and_unknown_path_answer_in_anthropics_shape(olp: ThreadServer) -> None:
    wrong = httpx.get(f"{olp.base_url}/v1/messages", headers=HEADERS)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert error_of(wrong)["type"] == "invalid_request_error"
    unknown = httpx.post(f"{olp.base_url}/v1/messages/batches", headers=HEADERS, content=b"{}")
    assert unknown.status_code == 404
    assert error_of(unknown)["type"] == "not_found_error"
    chat = httpx.get(f"{olp.base_url}/v1/chat/completions", headers=HEADERS)
    assert set(chat.json()) == {"error"}  # OpenAI's shape there
