"""The real Claude Code CLI pointed at OLP (`ANTHROPIC_BASE_URL` = OLP, an OLP key as its
API key) answers a prompt through an OLP chain whose hop is a fake upstream speaking
Anthropic's API or OpenAI's: what a user who sets Claude Code up against OLP gets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from real_cli import RealCli, real_cli

from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, olp_server

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]

ANSWER = "Paris is the capital of France."


@pytest.fixture(scope="module")
def claude() -> RealCli:
    return real_cli("claude")


def run_claude(claude: RealCli, home: Path, base_url: str, key_env: str) -> str:
    env = {
        "PATH": claude.path,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": base_url,
        key_env: OWNER_TOKEN,
        # As the README sets it up: the chain by name, for the helper calls too.
        "ANTHROPIC_MODEL": "smart",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": "smart",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [str(claude.command), "-p", "What is the capital of France?"],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, f"claude failed: {done.stderr[-3000:]}\n{done.stdout[-2000:]}"
    return done.stdout


@pytest.mark.parametrize(
    ("kind", "key_env"),
    [("anthropic-http", "ANTHROPIC_API_KEY"), ("openai-http", "ANTHROPIC_AUTH_TOKEN")],
)
def test_claude_code_answers_through_olp(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, kind: str, key_env: str
) -> None:
    upstream.script(*[Text(ANSWER, chunks=3)] * 8)
    base = upstream.base_url if kind == "anthropic-http" else upstream.openai_base_url
    config = {
        "providers": {"up": {"type": kind, "base_url": base, "models": ["model-a"]}},
        "routing": {"chains": {"smart": [{"provider": "up", "model": "model-a"}]}},
    }
    with olp_server(tmp_path, config) as olp:
        out = run_claude(claude, tmp_path / "home", olp.base_url, key_env)
    assert ANSWER in out
    asked = [r for r in upstream.requests if r.path in ("/v1/messages", "/v1/chat/completions")]
    assert asked, "Claude Code's request never reached the upstream"
    prompt = asked[-1].json
    assert prompt["model"] == "model-a"
    assert "capital of France" in str(prompt["messages"])
    assert prompt["tools"], "Claude Code's tools reach the upstream"
    if kind == "anthropic-http":
        # What Claude Code sends beyond the IR reaches an Anthropic upstream unchanged.
        assert "claude-code-20250219" in asked[-1].headers["anthropic-beta"]
        assert {"thinking", "context_management", "output_config"} <= set(prompt)
    else:
        assert "thinking" not in prompt and "context_management" not in prompt
