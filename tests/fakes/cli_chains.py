"""Two-hop chains for the codex/vibe/gemini end-to-end tests: the fake CLI first, a
FakeUpstream second (see test_cli_providers_e2e_more.py, test_cli_isolation_more.py).

    config = chat_config(tmp_path, beta, "codex", "app_server_olp_err_429")
    with olp_server(tmp_path, config) as server:
        resp = post(server)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fakes.cli import fake_env, install
from fakes.upstream import FakeUpstream

__all__ = ["CLIS", "TIMEOUTS", "CliSpec", "ask", "chat_config", "post"]

TIMEOUTS = {"first_byte_ms": 2000, "idle_ms": 1500, "total_ms": 3500}


@dataclass(frozen=True)
class CliSpec:
    type: str
    success: str  # the capture of a streamed success
    pieces: int  # content chunks the client sees for it
    env: dict[str, str] = field(default_factory=dict)  # always set for this CLI
    die_env: dict[str, str] = field(default_factory=dict)  # die_midstream after content
    salvage_scenario: str = "die_midstream"
    salvage_env: dict[str, str] = field(default_factory=dict)


_CODEX_CUT = {"FAKE_CLI_BASE": "app_server_olp_success", "FAKE_CLI_CUT": "13"}
_GEMINI_CUT = {"FAKE_CLI_BASE": "success_stream_json_notools", "FAKE_CLI_CUT": "4"}

CLIS = {
    "codex": CliSpec(
        type="codex-cli",
        success="app_server_olp_success",
        pieces=3,
        # codex app-server is spoken to: the fake answers each JSON-RPC request in turn.
        env={"FAKE_CLI_JSONRPC": "1"},
        die_env=_CODEX_CUT,
        salvage_env=_CODEX_CUT,
    ),
    "gemini": CliSpec(
        type="gemini-cli",
        success="success_stream_json_notools",
        pieces=3,
        die_env=_GEMINI_CUT,
        salvage_env=_GEMINI_CUT,
    ),
    "vibe": CliSpec(
        type="vibe-cli",
        success="success_streaming",
        pieces=1,  # whole messages only
        # The answer is one message: "mid-stream" is after it, before a clean exit.
        die_env={"FAKE_CLI_BASE": "success_streaming", "FAKE_CLI_CUT": "2"},
        salvage_scenario="success_streaming",
        salvage_env={"FAKE_CLI_EXIT": "3"},  # stopped on a limit after the answer
    ),
}


def chat_config(
    tmp_path: Path,
    beta: FakeUpstream,
    cli: str,
    scenario: str,
    *,
    only_cli: bool = False,
    record: Path | None = None,
    **env: str,
) -> dict[str, Any]:
    """Chains `chat` and `chat2` (two models of the CLI provider `cli`), then `beta`."""
    spec = CLIS[cli]
    bin_dir = install(tmp_path / "bin", cli)
    child_env = fake_env(record or tmp_path / "record.jsonl", scenario, **spec.env, **env)
    tail = [] if only_cli else [{"provider": "beta", "model": "m-beta"}]
    return {
        "providers": {
            "cli": {
                "type": spec.type,
                "command": str(bin_dir / cli),
                "env": child_env,
                "timeouts": TIMEOUTS,
            },
            "beta": {"type": "openai-http", "base_url": beta.openai_base_url},
        },
        "routing": {
            "chains": {
                "chat": [{"provider": "cli", "model": "m-cli"}, *tail],
                "chat2": [{"provider": "cli", "model": "m-cli-2"}, *tail],
            }
        },
        "cache": {"enabled": False},
    }


def ask(model: str = "chat", stream: bool = False, text: str = "What is 2+2?") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream}


def post(server: Any, model: str = "chat", stream: bool = False, **kw: Any) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json=kw.pop("body", None) or ask(model, stream),
        headers={"authorization": "Bearer test-owner-token"},
        timeout=30,
        **kw,
    )
