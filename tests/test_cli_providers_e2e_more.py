"""codex-cli, vibe-cli and gemini-cli end to end: a real OLP server, the fake CLI (a real
subprocess replaying the captures in tests/fixtures/cli/) as the first hop and a
FakeUpstream as the second. Streamed success, every captured error → fallback decision,
cooldown and headers, death mid-stream, salvage, garbage and never-ending output;
isolation (argv, env, cwd, HOME as the fake recorded them) and no process left behind
after a disconnect, a timeout or a shutdown."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from olp.providers._reset_time import parse_reset
from olp.providers.gemini_cli.events import next_midnight

from fakes.cli import records, wait_gone
from fakes.cli_chains import CLIS, chat_config, post
from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, ThreadServer, olp_server, sse_text

ANSWER = "Hello from the fake upstream. 2+2=4."


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        up.script(*[Text("from beta")] * 8)
        yield up


def detail(resp: httpx.Response) -> list[dict[str, Any]]:
    value: list[dict[str, Any]] = json.loads(resp.headers["x-olp-fallback-detail"])
    return value


def run(
    tmp_path: Path, beta: FakeUpstream, cli: str, scenario: str, **env: str
) -> AbstractContextManager[ThreadServer]:
    return olp_server(tmp_path, chat_config(tmp_path, beta, cli, scenario, **env))


# -- streamed success -------------------------------------------------------------------


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_streamed_success_through_the_openai_sdk(
    tmp_path: Path, beta: FakeUpstream, cli: str
) -> None:
    spec = CLIS[cli]
    with run(tmp_path, beta, cli, spec.success, FAKE_CLI_DELAY="0.02") as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "What is 2+2?"}], stream=True
        )
        chunks = [c.choices[0].delta.content for c in raw.parse() if c.choices]
    pieces = [c for c in chunks if c]
    assert "".join(pieces) == ANSWER
    assert len(pieces) == spec.pieces  # tokens as they come (codex, gemini) or one message
    assert raw.headers["x-olp-provider-used"] == "cli"
    assert raw.headers["x-olp-fallback-hops"] == "0"
    assert beta.calls == 0


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_non_streaming_success_with_usage(tmp_path: Path, beta: FakeUpstream, cli: str) -> None:
    with run(tmp_path, beta, cli, CLIS[cli].success) as server:
        resp = post(server, stream=False)
    body = resp.json()
    assert resp.status_code == 200
    assert body["choices"][0]["message"]["content"] == ANSWER
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == 30


# -- errors → fallback decision, cooldown, headers --------------------------------------

ERRORS = [
    ("codex", "app_server_olp_err_429", "RATE_LIMITED", "model"),
    ("codex", "app_server_err_429_no_retries", "RATE_LIMITED", "model"),
    ("codex", "app_server_olp_err_usage_limit", "QUOTA_EXHAUSTED", "provider"),
    ("codex", "app_server_olp_err_503", "OVERLOADED", None),
    ("codex", "app_server_olp_err_529", "OVERLOADED", None),
    ("codex", "app_server_olp_err_500", "UPSTREAM_ERROR", None),
    ("codex", "app_server_olp_err_conn_refused", "TRANSPORT", None),
    ("codex", "app_server_olp_err_hang", "TIMEOUT", None),
    ("vibe", "err_429_no_retry", "RATE_LIMITED", "model"),
    ("vibe", "err_503_no_retry", "OVERLOADED", None),
    ("vibe", "err_500_no_retry", "UPSTREAM_ERROR", None),
    ("vibe", "err_conn_refused_no_retry", "TRANSPORT", None),
    ("vibe", "err_hang_api_timeout_10s", "TIMEOUT", None),
    ("gemini", "err_429_default_retries", "RATE_LIMITED", "model"),
    ("gemini", "err_usage_limit_default_retries", "QUOTA_EXHAUSTED", "provider"),
    ("gemini", "err_503_default_retries", "OVERLOADED", None),
    ("gemini", "err_500_default_retries", "UPSTREAM_ERROR", None),
    ("gemini", "err_conn_refused_default_retries", "TRANSPORT", None),
    ("gemini", "err_hang_killed_after_120s", "TIMEOUT", None),
]


@pytest.mark.parametrize(("cli", "scenario", "code", "cooldown"), ERRORS)
def test_each_error_falls_back_with_its_code_and_cooldown(
    tmp_path: Path, beta: FakeUpstream, cli: str, scenario: str, code: str, cooldown: str | None
) -> None:
    record = tmp_path / "record.jsonl"
    with run(tmp_path, beta, cli, scenario) as server:
        first = post(server)
        assert first.status_code == 200
        assert first.json()["choices"][0]["message"]["content"] == "from beta"
        assert first.headers["x-olp-provider-used"] == "beta"
        assert first.headers["x-olp-fallback-hops"] == "1"
        [failed] = detail(first)
        assert (failed["provider"], failed["code"], failed["trigger"]) == ("cli", code, "fallback")
        again = post(server)
        other_model = post(server, model="chat2")
    runs = len(records(record))
    skipped = [d["code"] for d in detail(again)]
    if cooldown is None:
        assert runs == 3 and skipped == [code]
    elif cooldown == "model":  # that model only: the other model still runs
        assert skipped == ["COOLDOWN"] and runs == 2
        assert detail(other_model)[0]["code"] == code
    else:  # the whole provider
        assert skipped == ["COOLDOWN"] and runs == 1
        assert detail(other_model)[0]["code"] == "COOLDOWN"


@pytest.mark.parametrize(
    ("cli", "scenario"),
    [
        ("codex", "app_server_olp_err_usage_limit"),
        ("codex", "app_server_err_usage_limit_reached"),
        ("gemini", "err_usage_limit_default_retries"),
    ],
)
def test_usage_limit_cools_the_provider_down_until_its_reset(
    tmp_path: Path, beta: FakeUpstream, cli: str, scenario: str
) -> None:
    config = chat_config(tmp_path, beta, cli, scenario, only_cli=True)
    config["routing"]["max_cooldown_s"] = 3 * 86400  # no cap: the parsed reset itself
    with olp_server(tmp_path, config) as server:
        resp = post(server)
        now = time.time()
        quota = httpx.get(
            f"{server.base_url}/v0/management/quota",
            headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        ).json()
    assert resp.status_code == 429
    assert resp.json()["error"]["code"] == "all_providers_failed"
    [entry] = [p for p in quota["providers"] if p["provider"] == "cli"]
    [cooling] = entry["cooldowns"]
    assert cooling["model"] is None  # the whole provider
    expected = _expected_reset(cli, resp.json()["error"]["message"], now)
    assert cooling["until"] == pytest.approx(expected, abs=5)
    assert int(resp.headers["retry-after"]) == pytest.approx(expected - now, abs=5)


def _expected_reset(cli: str, message: str, now: float) -> float:
    if cli == "codex":
        reset = parse_reset(message, now)
        assert reset is not None
        return reset
    return next_midnight(now, False)


@pytest.mark.parametrize(
    ("cli", "scenario"),
    [
        ("codex", "app_server_olp_err_401"),
        ("vibe", "err_401_no_retry"),
        ("gemini", "err_401_default_retries"),
    ],
)
def test_auth_failure_is_a_502_and_stops_the_chain(
    tmp_path: Path, beta: FakeUpstream, cli: str, scenario: str
) -> None:
    with run(tmp_path, beta, cli, scenario) as server:
        resp = post(server)
    assert resp.status_code == 502
    error = resp.json()["error"]
    assert (error["code"], error["provider"]) == ("provider_auth_failed", "cli")
    assert detail(resp)[0]["trigger"] == "stop"
    assert beta.calls == 0


# -- death mid-stream, salvage, garbage, never-ending -----------------------------------


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_death_mid_stream_truncates_without_fallback(
    tmp_path: Path, beta: FakeUpstream, cli: str
) -> None:
    spec = CLIS[cli]
    with run(tmp_path, beta, cli, "die_midstream", **spec.die_env) as server:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert text and ANSWER.startswith(text)
    assert text != ANSWER or spec.pieces == 1  # vibe's one message came whole
    assert finish == ["length"]
    assert raw.headers["x-olp-provider-used"] == "cli"
    assert beta.calls == 0


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_content_then_nonzero_exit_is_salvaged_for_a_non_streaming_client(
    tmp_path: Path, beta: FakeUpstream, cli: str
) -> None:
    spec = CLIS[cli]
    with run(tmp_path, beta, cli, spec.salvage_scenario, **spec.salvage_env) as server:
        resp = post(server)
    choice = resp.json()["choices"][0]
    assert resp.status_code == 200
    assert choice["message"]["content"] and ANSWER.startswith(choice["message"]["content"])
    assert choice["finish_reason"] == "length"
    assert resp.headers["x-olp-provider-used"] == "cli"
    assert beta.calls == 0


@pytest.mark.parametrize("cli", sorted(CLIS))
@pytest.mark.parametrize(
    ("scenario", "code"),
    [("garbage", "SPAWN_FAILED"), ("never_ends", "TIMEOUT"), ("hang", "TIMEOUT")],
)
def test_garbage_or_endless_output_falls_back(
    tmp_path: Path, beta: FakeUpstream, cli: str, scenario: str, code: str
) -> None:
    with run(tmp_path, beta, cli, scenario) as server:
        resp = post(server, stream=True)
    assert resp.status_code == 200
    assert sse_text(resp.text) == "from beta"
    assert resp.headers["x-olp-provider-used"] == "beta"
    assert detail(resp)[0]["code"] == code


# -- isolation and clean-up -------------------------------------------------------------

CREDENTIALS = {
    "codex": ".codex/auth.json",
    "gemini": ".gemini/oauth_creds.json",
    "vibe": ".vibe/.env",
}
CONFIG_FILES = {
    "codex": ".codex/config.toml",
    "gemini": ".gemini/settings.json",
    "vibe": ".vibe/config.toml",
}
MARKER = "PROMPT-MARKER-7d1e"


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_child_runs_isolated_with_no_olp_secret(
    tmp_path: Path, beta: FakeUpstream, cli: str
) -> None:
    owner = tmp_path / "owner"
    credential = owner / CREDENTIALS[cli]
    credential.parent.mkdir(parents=True)
    credential.write_text('{"owner": "credential"}')
    config = chat_config(tmp_path, beta, cli, CLIS[cli].success)
    config["providers"]["beta"]["api_key_env"] = "BETA_KEY"
    env = {"HOME": str(owner), "BETA_KEY": "sk-beta-secret", "PATH": "/usr/bin:/bin"}
    body = {
        "model": "chat",
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": f"say {MARKER}"},
        ],
    }
    with olp_server(tmp_path, config, env=env) as server:
        assert post(server, body=body).status_code == 200
    [run_] = records(tmp_path / "record.jsonl")
    home, child_env = Path(run_["home"]), run_["env"]
    assert MARKER not in " ".join(run_["argv"]) and MARKER in run_["stdin"]
    assert "Be terse." not in " ".join(run_["argv"])
    assert home != owner and home.name == "home" and home.parent.name.startswith("olp-cli-")
    assert run_["cwd"] == str(home.parent / "work") and run_["cwd_listing"] == []
    assert child_env["HOME"] == str(home) and child_env["TZ"] == "UTC"
    assert child_env["TMPDIR"].startswith(str(home.parent))
    secrets = ("sk-beta-secret", OWNER_TOKEN)
    assert not [k for k, v in child_env.items() if any(s in v for s in secrets)]
    assert not {"BETA_KEY", "OLP_OWNER_TOKEN", "OLP_HOME"} & set(child_env)
    listing = run_["home_listing"]
    assert listing[CONFIG_FILES[cli]] is None  # written fresh, not the owner's
    assert listing[CREDENTIALS[cli]] == str(credential)  # linked, not copied
    assert not home.parent.exists()  # the private directory is gone
    assert credential.read_text() == '{"owner": "credential"}'


def _content_then(server: ThreadServer, got_content: threading.Event) -> None:
    """Stream a request until its first content chunk, flag it, then stop reading."""
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    headers = {"authorization": f"Bearer {OWNER_TOKEN}"}
    try:
        with httpx.stream(
            "POST", f"{server.base_url}/v1/chat/completions", json=body, headers=headers, timeout=30
        ) as resp:
            for line in resp.iter_lines():
                if '"content":"' in line and '"content":""' not in line:
                    got_content.set()
                    return  # leaving the block closes the connection: a disconnect
    except httpx.HTTPError:
        pass


@pytest.mark.parametrize("cli", sorted(CLIS))
@pytest.mark.parametrize("ending", ["disconnect", "shutdown"])
def test_no_process_is_left_behind(
    tmp_path: Path, beta: FakeUpstream, cli: str, ending: str
) -> None:
    """The CLI (which ignores SIGTERM, or left a grandchild) stalls after some content."""
    scenario = "ignore_sigterm" if ending == "disconnect" else "spawn_grandchild"
    config = chat_config(tmp_path, beta, cli, scenario, **CLIS[cli].die_env)
    config["providers"]["cli"]["timeouts"] = {
        "first_byte_ms": 20000,
        "idle_ms": 20000,
        "total_ms": 60000,
    }
    got_content = threading.Event()
    with olp_server(tmp_path, config) as server:
        reader = threading.Thread(target=_content_then, args=(server, got_content))
        reader.start()
        assert got_content.wait(15)
        if ending == "disconnect":
            reader.join(10)
            [run_] = records(tmp_path / "record.jsonl")
            assert wait_gone(run_["pid"], timeout=10)
    reader.join(10)
    [run_] = records(tmp_path / "record.jsonl")
    assert wait_gone(run_["pid"], timeout=10)
    if run_["grandchild_pid"]:
        assert wait_gone(run_["grandchild_pid"], timeout=10)


@pytest.mark.parametrize("cli", sorted(CLIS))
def test_no_process_is_left_after_a_timeout(tmp_path: Path, beta: FakeUpstream, cli: str) -> None:
    with run(tmp_path, beta, cli, "hang") as server:
        resp = post(server)
        [run_] = records(tmp_path / "record.jsonl")
        assert resp.headers["x-olp-provider-used"] == "beta"
        assert wait_gone(run_["pid"], timeout=10)


@pytest.mark.parametrize(
    ("cli", "system_file"), [("codex", ".codex/system.md"), ("gemini", ".gemini/system.md")]
)
def test_without_a_system_message_the_cli_agent_prompt_is_still_replaced(
    tmp_path: Path, beta: FakeUpstream, cli: str, system_file: str
) -> None:
    with run(tmp_path, beta, cli, CLIS[cli].success) as server:
        assert post(server).status_code == 200  # a lone user message
    [run_] = records(tmp_path / "record.jsonl")
    assert system_file in run_["home_listing"]
    assert cli != "gemini" or run_["env"]["GEMINI_SYSTEM_MD"] == f"~/{system_file}"
