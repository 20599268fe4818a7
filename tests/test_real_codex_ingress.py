"""The real Codex CLI pointed at OLP (a `[model_providers.olp]` entry with
`wire_api = "responses"`, an OLP key as its API key) answers a prompt through an OLP chain
whose hop is a fake upstream speaking OpenAI's or Anthropic's API: what a user who sets
Codex up against OLP gets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from real_cli import RealCli, real_cli

from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, olp_server

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]

ANSWER = "Paris is the capital of France."
# What a user writes in ~/.codex/config.toml (README, "Use it"), plus what keeps a test
# run off the network: no analytics, telemetry, update checks or web search.
CONFIG = """\
model = "smart"
model_provider = "olp"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

[otel]
exporter = "none"
trace_exporter = "none"
metrics_exporter = "none"

[model_providers.olp]
name = "OLP"
base_url = "{base_url}/v1"
env_key = "OLP_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""


@pytest.fixture(scope="module")
def codex() -> RealCli:
    return real_cli("codex")


def run_codex(codex: RealCli, home: Path, base_url: str) -> str:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(CONFIG.format(base_url=base_url))
    env = {
        "PATH": codex.path,
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "LANG": "C.UTF-8",
        "OLP_API_KEY": OWNER_TOKEN,
    }
    done = subprocess.run(
        [
            str(codex.command),
            "exec",
            "--skip-git-repo-check",
            "--ephemeral",
            "--disable",
            "plugins",
            "--disable",
            "apps",
            "What is the capital of France?",
        ],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, f"codex failed: {done.stderr[-3000:]}\n{done.stdout[-2000:]}"
    return done.stdout


@pytest.mark.parametrize("kind", ["openai-http", "anthropic-http"])
def test_codex_answers_through_olp(
    tmp_path: Path, codex: RealCli, upstream: FakeUpstream, kind: str
) -> None:
    upstream.script(*[Text(ANSWER, chunks=3)] * 4)
    base = upstream.base_url if kind == "anthropic-http" else upstream.openai_base_url
    config = {
        "providers": {"up": {"type": kind, "base_url": base, "models": ["model-a"]}},
        "routing": {"chains": {"smart": [{"provider": "up", "model": "model-a"}]}},
    }
    with olp_server(tmp_path, config) as olp:
        out = run_codex(codex, tmp_path / "home", olp.base_url)
    assert ANSWER in out
    asked = [r for r in upstream.requests if r.path in ("/v1/messages", "/v1/chat/completions")]
    assert asked, "Codex's request never reached the upstream"
    prompt = asked[-1].json
    assert prompt["model"] == "model-a"
    assert "capital of France" in str(prompt["messages"])
    assert prompt["tools"], "Codex's tools reach the upstream"
