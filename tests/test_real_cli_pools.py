"""A pool of two real `claude` CLI accounts: each member has its own credentials home and
its own upstream (two fake Anthropic servers), and a round-robin pool spreads requests
over both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from real_cli import RealCli, real_cli
from real_cli_chat import TIMEOUTS

from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, olp_server

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]


def member(real: RealCli, up: FakeUpstream, home: Path) -> dict[str, Any]:
    (home / ".claude").mkdir(parents=True)
    (home / ".claude/.credentials.json").write_text('{"note": "a second login lives here"}')
    return {
        "type": "claude-cli",
        "command": str(real.command),
        "credentials_home": str(home),
        "env": {"PATH": real.path, "ANTHROPIC_BASE_URL": up.base_url, "ANTHROPIC_API_KEY": "k"},
        "timeouts": TIMEOUTS,
    }


def test_a_round_robin_pool_of_two_claude_accounts(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    claude = real_cli("claude")
    alpha.script(Text("from me"))
    beta.script(Text("from partner"))
    config = {
        "providers": {
            "claude-me": member(claude, alpha, tmp_path / "me"),
            "claude-partner": member(claude, beta, tmp_path / "partner"),
        },
        "routing": {
            "chains": {
                "sonnet": [
                    {
                        "pool": ["claude-me", "claude-partner"],
                        "model": claude.model,
                        "pick": "round-robin",
                    }
                ]
            }
        },
        "server": {"heartbeat_interval_ms": 60_000},
        "cache": {"enabled": False},
    }
    with olp_server(tmp_path, config) as server:
        answers = {}
        for _ in range(2):
            resp = httpx.post(
                f"{server.base_url}/v1/chat/completions",
                json={"model": "sonnet", "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {OWNER_TOKEN}"},
                timeout=120,
            )
            assert resp.status_code == 200, resp.text
            used = resp.headers["x-olp-provider-used"]
            answers[used] = resp.json()["choices"][0]["message"]["content"]
    assert answers == {"claude-me": "from me", "claude-partner": "from partner"}
    assert alpha.calls == 1 and beta.calls == 1
