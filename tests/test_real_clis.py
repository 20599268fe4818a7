"""The real `claude` and `qwen` CLIs end to end through OLP, against FakeUpstream on
127.0.0.1 reached through the provider's `env` (ANTHROPIC_BASE_URL / OPENAI_BASE_URL):
a streamed answer, a rate limit that falls back to the next hop, a usage limit that cools
the provider down until its reset, and what the CLI really sent upstream (no tools).

The CLIs are installed by `real_cli` (cached between runs); without a reachable registry
these tests skip, loudly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from real_cli import RealCli, real_cli
from real_cli_chat import ANSWER, SYSTEM, detail, post, real_cli_config, stream_chat

from fakes.upstream import FakeUpstream, Hang, RecordedRequest, Status, Text
from olp_server import olp_server

pytestmark = [pytest.mark.real_cli, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def claude() -> RealCli:
    return real_cli("claude")


@pytest.fixture(scope="module")
def qwen() -> RealCli:
    return real_cli("qwen")


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        up.script(*[Text("from beta")] * 4)
        yield up


def config(
    cli: str, real: RealCli, env: dict[str, str], beta: FakeUpstream, **timeouts: int
) -> dict[str, Any]:
    return real_cli_config(cli, real, env, beta, timeouts=timeouts, provider={"consent": True})


def claude_env(up: FakeUpstream, **extra: str) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": up.base_url, "ANTHROPIC_API_KEY": "sk-ant-fake", **extra}


def qwen_env(up: FakeUpstream) -> dict[str, str]:
    return {"OPENAI_BASE_URL": up.openai_base_url, "OPENAI_API_KEY": "sk-fake-qwen"}


def model_requests(up: FakeUpstream) -> list[RecordedRequest]:
    return [r for r in up.requests if r.path in ("/v1/messages", "/v1/chat/completions")]


# -- claude -------------------------------------------------------------------------------


def test_claude_streams_an_answer_without_tools(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    upstream.script(Text(ANSWER, chunks=4, delay_s=0.05))
    with olp_server(tmp_path, config("claude", claude, claude_env(upstream), beta)) as olp:
        pieces, finish, headers = stream_chat(olp)
    assert "".join(pieces) == ANSWER
    assert len(pieces) >= 2  # token streaming, not one block at the end
    assert finish == "stop"
    assert headers["x-olp-provider-used"] == "real"
    [request] = model_requests(upstream)
    body = request.json
    assert body["tools"] == []  # no tool definitions reach the upstream
    assert body["model"] == "claude-sonnet-4-5"
    assert body["stream"] is True
    system = json.dumps(body["system"])
    assert "OLP-SYSTEM-MARKER" in system
    assert "Say it." in json.dumps(body["messages"])
    assert request.headers["x-api-key"] == "sk-ant-fake"
    assert beta.calls == 0


def test_claude_rate_limit_falls_back_at_once(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    upstream.script(Status(429, error, {"retry-after": "20"}))
    with olp_server(tmp_path, config("claude", claude, claude_env(upstream), beta)) as olp:
        started = time.monotonic()
        resp = post(olp)
        took = time.monotonic() - started
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "from beta"
    [hop] = detail(resp)
    assert (hop["provider"], hop["code"], hop["trigger"]) == ("real", "RATE_LIMITED", "fallback")
    assert len(model_requests(upstream)) == 1  # the CLI's own retries are off
    assert took < 30


def test_claude_hanging_upstream_falls_back_after_first_byte_ms(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    """The upstream takes the request and never answers. The CLI meanwhile prints its
    `system/init` and `status: requesting` lines: they are not the answer, so the hop
    falls back after `first_byte_ms`, long before `idle_ms`."""
    upstream.script(Hang(120))
    # Long enough for the CLI to start and send its request (about 2 s, more on a busy
    # machine); far shorter than idle_ms, which is what ended the hop before.
    timeouts = {"first_byte_ms": 10_000, "idle_ms": 120_000, "total_ms": 240_000}
    conf = config("claude", claude, claude_env(upstream), beta, **timeouts)
    with olp_server(tmp_path, conf) as olp:
        started = time.monotonic()
        resp = post(olp)
        took = time.monotonic() - started
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "from beta"
    [hop] = detail(resp)
    assert (hop["provider"], hop["code"], hop["trigger"]) == ("real", "TIMEOUT", "fallback")
    assert "first-byte timeout" in hop["message"]
    assert len(model_requests(upstream)) == 1  # the CLI did reach the upstream
    assert took < 40


def _unified_rejected(resets_at: int) -> dict[str, str]:
    """Anthropic's subscription usage-limit headers (as fixtures/cli/_tools/fakellm.py)."""
    return {
        "anthropic-ratelimit-unified-status": "rejected",
        "anthropic-ratelimit-unified-reset": str(resets_at),
        "anthropic-ratelimit-unified-representative-claim": "five_hour",
        "anthropic-ratelimit-unified-5h-status": "rejected",
        "anthropic-ratelimit-unified-5h-reset": str(resets_at),
        "anthropic-ratelimit-unified-5h-utilization": "1.02",
        "anthropic-ratelimit-unified-7d-status": "allowed",
        "anthropic-ratelimit-unified-7d-reset": str(resets_at + 4 * 86400),
        "anthropic-ratelimit-unified-7d-utilization": "0.41",
        "anthropic-ratelimit-unified-overage-status": "rejected",
        "anthropic-ratelimit-unified-overage-disabled-reason": "org_level_disabled",
    }


def test_claude_usage_limit_cools_the_provider_down_until_its_reset(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    resets_at = int(time.time()) + 2 * 3600
    error = {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "This request would exceed your limit."},
    }
    upstream.script(Status(429, error, _unified_rejected(resets_at)))
    # A (fake) subscription login: the CLI only reads unified headers for subscribers.
    env = claude_env(upstream, CLAUDE_CODE_OAUTH_TOKEN="sk-ant-oat01-fake")
    del env["ANTHROPIC_API_KEY"]
    with olp_server(tmp_path, config("claude", claude, env, beta)) as olp:
        first = post(olp)
        second = post(olp)
    assert first.status_code == 200
    [hop] = detail(first)
    assert hop["code"] == "QUOTA_EXHAUSTED"
    assert "limit" in hop["message"]
    [skipped] = detail(second)
    assert (skipped["code"], skipped["trigger"]) == ("COOLDOWN", "skip")
    left = float(skipped["message"].split("cooling down for ")[1].split("s")[0])
    assert resets_at - time.time() - 120 <= left <= resets_at - time.time() + 1
    assert len(model_requests(upstream)) == 1  # the second request did not run the CLI
    assert beta.calls == 2


# -- qwen ---------------------------------------------------------------------------------


def test_qwen_streams_an_answer_without_tools(
    tmp_path: Path, qwen: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    upstream.script(Text(ANSWER, chunks=4, delay_s=0.05))
    with olp_server(tmp_path, config("qwen", qwen, qwen_env(upstream), beta)) as olp:
        pieces, finish, headers = stream_chat(olp)
    assert "".join(pieces) == ANSWER
    assert len(pieces) >= 2
    assert finish == "stop"
    assert headers["x-olp-provider-used"] == "real"
    [request] = model_requests(upstream)  # no background (memory) request
    body = request.json
    assert body.get("tools", []) == []
    assert body["model"] == "qwen3-coder-plus"
    assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    # The question alone: no environment message (date, OS, directory) before it.
    [asked] = body["messages"][1:]
    assert "Say it." in json.dumps(asked)
    assert beta.calls == 0


def test_qwen_api_error_answer_is_an_error_not_content(
    tmp_path: Path, qwen: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    """Qwen Code reports a rejected key as a successful `[API Error: 401 …]` answer with
    exit status 0: OLP makes it the auth failure it is (502, no fallback)."""
    error = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
    upstream.script(Status(401, error))
    with olp_server(tmp_path, config("qwen", qwen, qwen_env(upstream), beta)) as olp:
        resp = post(olp)
    assert resp.status_code == 502
    body = resp.json()["error"]
    assert body["code"] == "provider_auth_failed"
    assert body["message"].startswith("qwen: [API Error: 401")
    assert beta.calls == 0


def test_qwen_rate_limit_falls_back_at_its_first_retry_notice(
    tmp_path: Path, qwen: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    """Qwen Code retries a 429 for minutes and says so only in its debug log, which OLP
    links to the child's stderr: the first retry notice is the failure. The hop is a
    RATE_LIMITED fallback long before any deadline (60 s), the child is killed (its
    retries stop), and the model cools down."""
    error = {"error": {"message": "slow down", "type": "rate_limit_error"}}
    upstream.script(*[Status(429, error)] * 200)
    with olp_server(tmp_path, config("qwen", qwen, qwen_env(upstream), beta)) as olp:
        started = time.monotonic()
        resp = post(olp)
        took = time.monotonic() - started
        tried = len(model_requests(upstream))
        again = post(olp)
        time.sleep(2)
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "from beta"
    [hop] = detail(resp)
    assert (hop["code"], hop["trigger"]) == ("RATE_LIMITED", "fallback")
    assert hop["message"].startswith("qwen: [API Error: 429 slow down")
    assert took < 30
    assert tried >= 1
    assert len(model_requests(upstream)) == tried  # no retries after the kill
    assert (detail(again)[0]["code"], detail(again)[0]["trigger"]) == ("COOLDOWN", "skip")


def test_qwen_hanging_upstream_falls_back_after_first_byte_ms(
    tmp_path: Path, qwen: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    """Qwen Code prints its `system/init` line and waits on an upstream that never
    answers: no answer came, so the hop ends after `first_byte_ms`, not `idle_ms`."""
    upstream.script(Hang(120))
    # Long enough for the CLI (slow to start: node, its bundle) to send its request.
    timeouts = {"first_byte_ms": 20_000, "idle_ms": 120_000, "total_ms": 240_000}
    conf = config("qwen", qwen, qwen_env(upstream), beta, **timeouts)
    with olp_server(tmp_path, conf) as olp:
        started = time.monotonic()
        resp = post(olp)
        took = time.monotonic() - started
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "from beta"
    [hop] = detail(resp)
    assert (hop["code"], hop["trigger"]) == ("TIMEOUT", "fallback")
    assert "first-byte timeout" in hop["message"]
    assert took < 60  # first_byte_ms, far from idle_ms
    assert len(model_requests(upstream)) == 1


def test_claude_adds_the_owners_system_prompt_after_the_clients(
    tmp_path: Path, claude: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    upstream.script(Text(ANSWER))
    cfg = config("claude", claude, claude_env(upstream), beta)
    cfg["providers"]["real"]["system_prompt"] = "OWNER-RULE: answer in French."
    with olp_server(tmp_path, cfg) as olp:
        pieces, _, _ = stream_chat(olp)
    assert "".join(pieces) == ANSWER
    [request] = model_requests(upstream)
    system = json.dumps(request.json["system"])
    assert "OLP-SYSTEM-MARKER" in system and "OWNER-RULE: answer in French." in system
    assert system.index("OLP-SYSTEM-MARKER") < system.index("OWNER-RULE")


def test_qwen_reads_no_env_file_above_its_working_directory(
    tmp_path: Path, qwen: RealCli, upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    """Qwen Code loads the first `.env` it finds from its working directory up to `/`: one
    above OLP's temporary directories (here a dead proxy) must not reach it."""
    temp = tmp_path / "temp"
    temp.mkdir()
    (temp / ".env").write_text("HTTP_PROXY=http://127.0.0.1:9\nHTTPS_PROXY=http://127.0.0.1:9\n")
    upstream.script(Text(ANSWER))
    conf = config("qwen", qwen, qwen_env(upstream), beta)
    with olp_server(tmp_path, conf, {"TMPDIR": str(temp)}) as olp:
        pieces, _, headers = stream_chat(olp)
    assert "".join(pieces) == ANSWER
    assert headers["x-olp-provider-used"] == "real"
    assert beta.calls == 0
