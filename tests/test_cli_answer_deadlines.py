"""OLP's first-byte and idle deadlines follow a CLI's *answer*, not its chatter.

Every coding CLI prints lines of its own before its upstream answers (claude's
`system/init` and `status: requesting`, gemini's `init` and the echoed prompt, codex's
JSON-RPC handshake, qwen's `system/init`) and may print more while the upstream stalls
(Anthropic `ping` events). The fake CLI replays those captured runs byte for byte, then
hangs as the real CLI did, with a chain [the CLI, beta]: the hop must fall back after
`first_byte_ms` (here 1 s), not after `idle_ms` (here 30 s).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.cli import fake_env, install, records, wait_gone
from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cli"
TIMEOUTS = {"first_byte_ms": 1000, "idle_ms": 30_000, "total_ms": 60_000}
# Well under idle_ms: what a fallback after first_byte_ms (plus CLI start-up) takes.
WITHIN_S = 8.0
TYPES = {"claude": "claude-cli", "qwen": "qwen-cli", "gemini": "gemini-cli", "codex": "codex-cli"}


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


def config(
    tmp_path: Path, beta: FakeUpstream, cli: str, env: dict[str, str], **timeouts: int
) -> dict[str, Any]:
    bin_dir = install(tmp_path / "bin", cli)
    return {
        "providers": {
            "cli": {
                "type": TYPES[cli],
                "command": str(bin_dir / cli),
                "env": env,
                "timeouts": {**TIMEOUTS, **timeouts},
                "consent": True,
            },
            "beta": {"type": "openai-http", "base_url": beta.openai_base_url},
        },
        "routing": {
            "chains": {
                "chat": [
                    {"provider": "cli", "model": "m-cli"},
                    {"provider": "beta", "model": "m-beta"},
                ]
            }
        },
        "cache": {"enabled": False},
    }


def post(server: ThreadServer) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "chat", "messages": [{"role": "user", "content": "What is 2+2?"}]},
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        timeout=60,
    )


def detail(resp: httpx.Response) -> list[dict[str, Any]]:
    value: list[dict[str, Any]] = json.loads(resp.headers["x-olp-fallback-detail"])
    return value


@pytest.mark.parametrize(
    ("cli", "scenario", "extra"),
    [
        ("claude", "err_hang_default_killed_after_60s", {}),  # init, status: requesting
        ("qwen", "err_429_default_retries", {}),  # init, then its own 429 retry loop
        ("qwen", "err_hang_killed_after_120s", {}),
        ("gemini", "err_hang_killed_after_120s", {}),  # init, the echoed prompt
        ("codex", "app_server_olp_err_hang", {"FAKE_CLI_JSONRPC": "1"}),  # the handshake
    ],
)
def test_chatter_before_the_answer_does_not_stop_the_first_byte_deadline(
    tmp_path: Path, beta: FakeUpstream, cli: str, scenario: str, extra: dict[str, str]
) -> None:
    record = tmp_path / "record.jsonl"
    conf = config(tmp_path, beta, cli, fake_env(record, scenario, **extra))
    with olp_server(tmp_path, conf) as olp:
        started = time.monotonic()
        resp = post(olp)
        took = time.monotonic() - started
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-olp-provider-used"] == "beta"
    [hop] = detail(resp)
    assert (hop["provider"], hop["code"], hop["trigger"]) == ("cli", "TIMEOUT", "fallback")
    assert "first-byte timeout" in hop["message"]
    assert took < WITHIN_S
    [run] = records(record)
    assert wait_gone(run["pid"], 3.0)


def _text_then_pings(fixtures: Path, pings: int) -> str:
    """A claude run whose upstream sends part of the answer, then only `ping` events:
    the captured success's lines up to its first text delta, then the pings, then the
    CLI hangs (exit 124: what the capture harness records for a run it had to kill)."""
    lines = (FIXTURES / "claude" / "success_stream_json_partial.jsonl").read_text().splitlines()
    first_text = next(i for i, line in enumerate(lines) if '"text_delta"' in line)
    ping = {"type": "stream_event", "event": {"type": "ping"}, "session_id": "s"}
    out = [*lines[: first_text + 1], *[json.dumps(ping)] * pings]
    fixtures.mkdir(parents=True, exist_ok=True)
    (fixtures / "text_then_pings.jsonl").write_text("\n".join(out) + "\n")
    (fixtures / "text_then_pings.meta.json").write_text('{"exit_code": 124}')
    return "text_then_pings"


def test_heartbeats_after_part_of_the_answer_do_not_restart_the_idle_clock(
    tmp_path: Path, beta: FakeUpstream
) -> None:
    """Pings every 0.25 s for 15 s after the first words: the idle deadline (1.5 s) still
    ends the run, and the words already sent are kept (`length`), not replaced."""
    fixtures = tmp_path / "fixtures"
    scenario = _text_then_pings(fixtures, pings=60)
    record = tmp_path / "record.jsonl"
    env = fake_env(record, scenario, FAKE_CLI_FIXTURES=str(fixtures), FAKE_CLI_DELAY="0.25")
    conf = config(tmp_path, beta, "claude", env, first_byte_ms=5000, idle_ms=1500)
    with olp_server(tmp_path, conf) as olp:
        started = time.monotonic()
        resp = post(olp)
        took = time.monotonic() - started
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert choice["message"]["content"] == "Hello from "
    assert choice["finish_reason"] == "length"
    assert resp.headers["x-olp-provider-used"] == "cli"
    assert took < WITHIN_S
    [run] = records(record)
    assert wait_gone(run["pid"], 3.0)
    assert beta.calls == 0
