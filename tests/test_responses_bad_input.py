"""`POST /v1/responses` and `GET /v1/models/{id}` handle any input like the chat route: an
answer, or an OpenAI-shaped error with its documented status; never a 500, a traceback,
a dropped connection or a hang."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import Response

from fuzzing import FUZZ, dumps, mutations
from olp.errors import InvalidRequest
from olp.ir import ResponseBuilder, TextDelta, ToolCallDelta
from olp.wire.openai_responses import OpenAIResponses

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

AUTH = {"authorization": f"Bearer {OWNER_TOKEN}", "content-type": "application/json"}
FUZZ_HTTP = settings(
    FUZZ,
    max_examples=min(FUZZ.max_examples, 60),
    suppress_health_check=[*FUZZ.suppress_health_check, HealthCheck.function_scoped_fixture],
)
RESPONSES_REQUESTS: list[Any] = [
    {"model": "m", "input": "hi"},
    {
        "model": "m",
        "instructions": "be brief",
        "stream": True,
        "temperature": 0.2,
        "top_p": 0.9,
        "max_output_tokens": 50,
        "store": False,
        "metadata": {"k": "v"},
        "reasoning": {"effort": "low"},
        "text": {
            "format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}},
            "verbosity": "low",
        },
        "input": [
            {"role": "developer", "content": "rules"},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is this"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                ],
            },
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
        ],
        "tools": [
            {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True},
            {"type": "custom", "name": "patch", "description": "free-form"},
        ],
        "tool_choice": {"type": "function", "name": "f"},
        "parallel_tool_calls": False,
    },
]
DIALECT = OpenAIResponses()


@given(st.one_of(mutations(RESPONSES_REQUESTS).map(dumps), st.binary(max_size=200)))
@FUZZ
def test_the_parser_gives_a_request_or_names_the_problem(body: bytes) -> None:
    try:
        request = DIALECT.parse(body)
    except InvalidRequest as err:
        problem = err.message
        assert problem and "Traceback" not in problem
        return
    # Whatever it accepted encodes to an answer the openai SDK's model takes.
    answer = ResponseBuilder().extend([TextDelta("a"), ToolCallDelta(0, "c", "f", "{}")]).build()
    Response.model_validate(orjson.loads(DIALECT.response_body(answer, request, "resp_1", 1)))


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


def error_of(resp: httpx.Response) -> dict[str, Any]:
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"}
    assert {"message", "type", "code", "param"} <= set(body["error"])
    assert "Traceback" not in body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


def test_any_body_gets_an_answer_or_a_named_error(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    valid = st.sampled_from(RESPONSES_REQUESTS).map(dumps)
    almost = mutations(RESPONSES_REQUESTS).map(dumps)

    @FUZZ_HTTP
    @given(st.one_of(valid, almost, almost, st.binary(max_size=200)))
    def run(body: bytes) -> None:
        resp = httpx.post(f"{olp.base_url}/v1/responses", content=body, headers=AUTH, timeout=10)
        if resp.status_code == 200:
            assert resp.text.startswith(("{", "event: response.created")), resp.text[:200]
            return
        assert resp.status_code in (400, 404, 413), resp.text[:300]
        error_of(resp)

    run()
    assert upstream.calls > 0  # the valid ones went all the way


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{", None),
        (b"[]", None),
        (b'{"model": "m", "input": "x", "tools": [{"type": "computer_use_preview"}]}',
         "tools[0].type"),
        (b'{"model": "m\\u0000", "input": "x"}', "model"),
        (b'{"model": "m", "input": [{"role": "user", "content": [{"type": "input_audio"}]}]}',
         "input[0].content[0].type"),
    ],
)  # fmt: skip
def test_bad_bodies_are_400_naming_the_field(
    olp: ThreadServer, body: bytes, param: str | None
) -> None:
    resp = httpx.post(f"{olp.base_url}/v1/responses", content=body, headers=AUTH)
    assert resp.status_code == 400
    assert error_of(resp)["param"] == param


def test_wrong_content_type_and_method(olp: ThreadServer) -> None:
    url = f"{olp.base_url}/v1/responses"
    headers = {**AUTH, "content-type": "text/plain"}
    assert httpx.post(url, content=b'{"model":"m","input":"x"}', headers=headers).status_code == 415
    resp = httpx.get(url, headers=AUTH)
    assert resp.status_code == 405
    error_of(resp)


def test_any_model_id_gets_the_model_or_a_404(olp: ThreadServer) -> None:
    @FUZZ_HTTP
    @given(st.text(min_size=1, max_size=60))
    def run(model_id: str) -> None:
        resp = httpx.get(f"{olp.base_url}/v1/models/{quote(model_id, safe='')}", headers=AUTH)
        if resp.status_code == 200:
            assert resp.json()["id"] == model_id
            return
        assert resp.status_code == 404, resp.text[:300]
        assert error_of(resp)["code"] in ("model_not_found", "not_found")

    run()
