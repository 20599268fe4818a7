"""The real `codex` CLI (app-server) started ahead through OLP with `"warm": 1`, against a
fake Responses upstream: a warm request answers, alone (no earlier request's text in it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from real_cli import RealCli, real_cli
from real_cli_chat import real_cli_config

from fakes.responses_gemini_upstream import ResponsesGeminiUpstream
from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, ThreadServer, eventually, olp_server

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def codex() -> RealCli:
    return real_cli("codex")


@pytest.fixture
def upstream() -> Iterator[ResponsesGeminiUpstream]:
    with ResponsesGeminiUpstream() as up:
        yield up


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


def chat(olp: ThreadServer, text: str) -> str:
    body = {"model": "chat", "messages": [{"role": "user", "content": text}]}
    headers = {"authorization": f"Bearer {OWNER_TOKEN}"}
    url = f"{olp.base_url}/v1/chat/completions"
    resp = httpx.post(url, json=body, headers=headers, timeout=150)
    assert resp.status_code == 200 and resp.headers["x-olp-provider-used"] == "real", resp.text
    content: str = resp.json()["choices"][0]["message"]["content"]
    return content


def warm(olp: ThreadServer) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {OWNER_TOKEN}"}
    status = httpx.get(f"{olp.base_url}/v0/management/status", headers=headers).json()
    [real] = [p for p in status["providers"] if p["name"] == "real"]
    stats: dict[str, Any] = real["warm"]
    return stats


def test_a_warm_codex_answers_alone(
    tmp_path: Path, codex: RealCli, upstream: ResponsesGeminiUpstream, beta: FakeUpstream
) -> None:
    upstream.script(Text("One FIRST-ANSWER."), Text("Two."))
    env = {"OPENAI_BASE_URL": upstream.openai_base_url, "OPENAI_API_KEY": "sk-fake-codex"}
    config = real_cli_config("codex", codex, env, beta, provider={"warm": 1})
    with olp_server(tmp_path, config) as olp:
        assert chat(olp, "Say FIRST-MARKER.") == "One FIRST-ANSWER."
        assert eventually(lambda: warm(olp)["waiting"] == 1, 60)
        assert chat(olp, "Say SECOND-MARKER.") == "Two."
        assert (warm(olp)["hits"], warm(olp)["misses"]) == (1, 1)
    first, second = (json.dumps(r.json) for r in upstream.requests if r.path == "/v1/responses")
    assert "FIRST-MARKER" in first
    assert "FIRST-MARKER" not in second and "FIRST-ANSWER" not in second
    assert "SECOND-MARKER" in second
