"""Never a silent drop: a hop whose provider cannot honour a request's `tools`,
`tool_choice` or `response_format` is skipped like a gate (`UNSUPPORTED`), the chain goes
on, and a chain no hop of which can honour it answers 400 naming the field.

Real OLP, the fake vibe CLI (no client tools) and a FakeUpstream behind openai-http.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from olp.ir import ChatRequest, Message, NamedToolChoice, ResponseFormat, Tool
from olp.providers.base import Capabilities

from fakes.cli import fake_env, install, records
from fakes.cli_chains import CLIS
from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
QUESTION = [{"role": "user", "content": "weather?"}]


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "runs.jsonl"


@pytest.fixture
def olp(tmp_path: Path, record: Path, beta: FakeUpstream) -> Iterator[ThreadServer]:
    with olp_server(tmp_path, config(tmp_path, record, beta)) as server:
        yield server


def config(tmp_path: Path, record: Path, beta: FakeUpstream) -> dict[str, Any]:
    """Chain `chat`: the fake vibe CLI, then `beta`; chain `solo`: the CLI alone."""
    bin_dir = install(tmp_path / "bin", "vibe")
    cli = {
        "type": "vibe-cli",
        "command": str(bin_dir / "vibe"),
        "env": fake_env(record, "success_streaming", **CLIS["vibe"].env),
    }
    return {
        "providers": {
            "cli": cli,
            "beta": {"type": "openai-http", "base_url": beta.openai_base_url},
        },
        "routing": {
            "chains": {
                "chat": [
                    {"provider": "cli", "model": "devstral-medium-latest"},
                    {"provider": "beta", "model": "m-beta"},
                ],
                "solo": [{"provider": "cli", "model": "devstral-medium-latest"}],
            }
        },
        "cache": {"enabled": False},
    }


def post(server: ThreadServer, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "chat", "messages": QUESTION, **body},
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        timeout=20,
    )


def test_a_cli_without_client_tools_is_skipped_and_the_next_hop_answers(
    olp: ThreadServer, record: Path, beta: FakeUpstream
) -> None:
    beta.script(Text("from beta"))
    resp = post(olp, tools=TOOLS)
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "from beta"
    [hop] = json.loads(resp.headers["x-olp-fallback-detail"])
    assert (hop["provider"], hop["code"], hop["trigger"]) == ("cli", "UNSUPPORTED", "skip")
    assert hop["message"] == "cli cannot honour `tools`"
    assert records(record) == []  # the CLI never ran
    assert beta.requests[-1].json["tools"][0]["function"]["name"] == "get_weather"


def test_the_skip_is_in_the_ledger(tmp_path: Path, record: Path, beta: FakeUpstream) -> None:
    with olp_server(tmp_path, config(tmp_path, record, beta)) as server:
        assert post(server, tools=TOOLS).status_code == 200
    conn = sqlite3.connect(tmp_path / "olp-home" / "ledger.db")
    attempts = conn.execute(
        "SELECT provider, outcome, code, trigger FROM ledger_attempts ORDER BY hop"
    ).fetchall()
    conn.close()
    assert attempts == [
        ("cli", "skipped", "UNSUPPORTED", "skip"),
        ("beta", "served", None, None),
    ]


def test_tools_the_model_may_not_call_need_no_tool_support(
    olp: ThreadServer, record: Path, beta: FakeUpstream
) -> None:
    resp = post(olp, tools=TOOLS, tool_choice="none")
    assert resp.status_code == 200
    assert resp.headers["x-olp-provider-used"] == "cli"
    assert len(records(record)) == 1
    assert beta.calls == 0


def test_no_hop_that_can_honour_it_is_a_400_naming_the_field(
    olp: ThreadServer, record: Path
) -> None:
    resp = post(olp, model="solo", tools=TOOLS)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "unsupported_request"
    assert error["param"] == "tools"
    assert error["message"].startswith("no provider of this model can honour `tools` (tried: cli)")
    assert records(record) == []


# -- the refusal itself (pure) ------------------------------------------------------------


def ask(**kw: Any) -> ChatRequest:
    return ChatRequest(model="m", messages=(Message("user", "hi"),), **kw)


WEATHER = (Tool("get_weather"),)


@pytest.mark.parametrize(
    ("capabilities", "request_", "refused"),
    [
        (Capabilities(), ask(tools=WEATHER, tool_choice="required"), None),
        (Capabilities(tools=False), ask(tools=WEATHER), "tools"),
        (Capabilities(tools=False), ask(tools=WEATHER, tool_choice="none"), None),
        (Capabilities(tools=False), ask(tool_choice="required"), None),  # no tools: nothing to do
        (Capabilities(tool_choices=frozenset({"auto", "none"})), ask(tools=WEATHER), None),
        (
            Capabilities(tool_choices=frozenset({"auto", "none"})),
            ask(tools=WEATHER, tool_choice="required"),
            "tool_choice",
        ),
        (
            Capabilities(tool_choices=frozenset({"auto", "none"})),
            ask(tools=WEATHER, tool_choice=NamedToolChoice("get_weather")),
            "tool_choice",
        ),
        (
            Capabilities(json_mode=False),
            ask(response_format=ResponseFormat("json_object")),
            "response_format",
        ),
        (Capabilities(json_mode=False), ask(response_format=ResponseFormat("text")), None),
    ],
)
def test_refusal_names_the_field(
    capabilities: Capabilities, request_: ChatRequest, refused: str | None
) -> None:
    assert capabilities.refusal(request_) == refused
