"""CLI providers end to end: a real OLP, the fake CLI replaying captures, FakeUpstream as
the next hop. Covers the taxonomy, fallback, cooldown, salvage, isolation and — checked in
the process table — that no child outlives its request."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fakes.cli import fake_env, install, records, wait_gone
from fakes.upstream import DEFAULT_TEXT, FakeUpstream
from olp_server import OWNER_TOKEN, ThreadServer, olp_server

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cli"
TEXT = "Hello from the fake upstream. 2+2=4."
TIMEOUTS = {"first_byte_ms": 3000, "idle_ms": 1500, "total_ms": 6000}
SECRET = "sk-olp-process-secret"


@pytest.fixture
def beta() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    return install(tmp_path / "bin", "claude", "qwen")


@pytest.fixture
def owner_home(tmp_path: Path) -> Path:
    home = tmp_path / "owner"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": {}}')
    return home


class Rig:
    """One OLP with chain `sonnet` = [cli provider, beta (openai-http)]."""

    def __init__(self, tmp_path: Path, bin_dir: Path, owner: Path, beta: FakeUpstream) -> None:
        self.tmp_path, self.bin_dir, self.owner, self.beta = tmp_path, bin_dir, owner, beta
        self.record = tmp_path / "record.jsonl"

    def config(self, cli: str, scenario: str, **env: str) -> dict[str, Any]:
        timeouts = {**TIMEOUTS, **json.loads(env.pop("TIMEOUTS", "{}"))}
        model = "claude-sonnet-4-5" if cli == "claude" else "qwen3-coder-plus"
        return {
            "providers": {
                "cli": {
                    "type": f"{cli}-cli",
                    "command": str(self.bin_dir / cli),
                    "env": fake_env(self.record, scenario, **env),
                    "timeouts": timeouts,
                    "consent": True,
                },
                "beta": {"type": "openai-http", "base_url": self.beta.openai_base_url},
            },
            "routing": {
                "chains": {
                    "sonnet": [
                        {"provider": "cli", "model": model},
                        {"provider": "beta", "model": "m-beta"},
                    ]
                }
            },
            # Every request must reach the chain (a cached answer would hide the hops).
            "cache": {"enabled": False},
        }

    def server(self, cli: str, scenario: str, **env: str) -> Any:
        process_env = {"HOME": str(self.owner), "OPENAI_API_KEY": SECRET}
        sub = self.tmp_path / f"olp-{len(list(self.tmp_path.glob('olp-*')))}"
        sub.mkdir()
        return olp_server(sub, self.config(cli, scenario, **env), env=process_env)

    def runs(self) -> list[dict[str, Any]]:
        return records(self.record)


@pytest.fixture
def rig(tmp_path: Path, bin_dir: Path, owner_home: Path, beta: FakeUpstream) -> Rig:
    return Rig(tmp_path, bin_dir, owner_home, beta)


def post(server: ThreadServer, stream: bool = False, **body: Any) -> httpx.Response:
    payload = {"model": "sonnet", "messages": [{"role": "user", "content": "What is 2+2?"}]}
    payload.update(body, stream=stream)
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json=payload,
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        timeout=20,
    )


def detail(resp: httpx.Response) -> list[dict[str, Any]]:
    value: list[dict[str, Any]] = json.loads(resp.headers["x-olp-fallback-detail"])
    return value


def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)


# -- client tools ----------------------------------------------------------------------

WEATHER_AND_TIME = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("get_weather", "get_time")
]


def test_a_claude_without_the_tools_yet_is_asked_again_before_its_prompt(rig: Rig) -> None:
    """A CLI whose status shows the bridge without the request's tools (one started ahead
    that has not taken the changed list) gets its prompt only once they show."""
    tools = {"FAKE_CLI_MCP_TOOLS": "get_weather,get_time", "FAKE_CLI_MCP_LATE": "3"}
    with rig.server("claude", "tool_use_parallel_bridged", **tools) as olp:
        answer = client(olp).chat.completions.create(
            model="sonnet",
            messages=[{"role": "user", "content": "Weather in Paris, and the time?"}],
            tools=WEATHER_AND_TIME,  # type: ignore[arg-type]
        )
    calls = answer.choices[0].message.tool_calls or []
    assert [call.function.name for call in calls] == ["get_weather", "get_time"]
    [run] = rig.runs()
    kinds = [
        json.loads(line).get("request", {}).get("subtype")
        for line in run["stdin"].split("\n")
        if line
    ]
    # The status was asked four times: three without the tools, then with them.
    assert kinds == ["initialize", "mcp_status", "mcp_status", "mcp_status", "mcp_status", None]


def test_a_claude_whose_bridge_failed_falls_back_before_its_prompt(rig: Rig) -> None:
    with rig.server("claude", "tool_use_parallel_bridged", FAKE_CLI_MCP_TOOLS="failed") as olp:
        resp = post(olp, tools=WEATHER_AND_TIME)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == DEFAULT_TEXT  # the next hop's
    [hop] = [h for h in detail(resp) if h["provider"] == "cli"]
    assert hop["code"] == "SPAWN_FAILED"
    assert "OLP's MCP bridge: its MCP status for the bridge is failed" in hop["message"]
    assert rig.runs() == []  # the fake records once it read its prompt: it never had it


# -- success -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cli", "scenario"),
    [("claude", "success_stream_json_partial"), ("qwen", "success_stream_json_partial")],
)
def test_streamed_success_through_the_openai_sdk(rig: Rig, cli: str, scenario: str) -> None:
    # Lines 0.3 s apart: far more than a busy CI machine can stall this client thread, so
    # "the pieces arrived spread out" can only fail if OLP buffered the answer.
    with rig.server(cli, scenario, FAKE_CLI_DELAY="0.3") as olp:
        stream = client(olp).chat.completions.create(
            model="sonnet",
            messages=[{"role": "user", "content": "What is 2+2?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces, arrivals, finish, usage = [], [], None, None
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
                arrivals.append(time.monotonic())
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
            usage = chunk.usage or usage
    assert "".join(pieces) == TEXT
    assert len(pieces) >= 3
    assert arrivals[-1] - arrivals[0] > 0.25  # streamed as the CLI wrote, not buffered
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens > 0
    assert rig.beta.calls == 0
    assert len(rig.runs()) == 1


def test_non_streaming_success_headers_and_cost(rig: Rig) -> None:
    with rig.server("claude", "success_stream_json_partial") as olp:
        resp = post(olp)
    assert resp.status_code == 200
    body = resp.json()
    assert body["choices"][0]["message"]["content"] == TEXT
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] == 25
    assert resp.headers["x-olp-provider-used"] == "cli"
    assert resp.headers["x-olp-model-used"] == "claude-sonnet-4-5"
    assert resp.headers["x-olp-fallback-hops"] == "0"


# -- captured errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cli", "scenario", "code"),
    [
        ("claude", "err_429_no_retries_env", "RATE_LIMITED"),
        ("claude", "err_529_no_retries_env", "OVERLOADED"),
        ("claude", "err_500_no_retries_env", "UPSTREAM_ERROR"),
        ("claude", "err_conn_refused_no_retries_env", "TRANSPORT"),
        ("claude", "err_hang_api_timeout_5s_1retry", "TIMEOUT"),
        ("claude", "hang", "TIMEOUT"),
        ("claude", "err_hang_default_killed_after_60s", "TIMEOUT"),
        ("claude", "garbage", "SPAWN_FAILED"),
        ("claude", "huge_line", "SPAWN_FAILED"),
        ("claude", "success_stream_json_no_verbose", "SPAWN_FAILED"),
        ("qwen", "err_500_default_retries", "UPSTREAM_ERROR"),
        ("qwen", "err_conn_refused_default_retries", "TRANSPORT"),
        ("qwen", "err_429_default_retries", "TIMEOUT"),  # it retries for minutes
        ("qwen", "err_hang_killed_after_120s", "TIMEOUT"),
    ],
)
def test_captured_failures_fall_back_to_the_next_hop(
    rig: Rig, cli: str, scenario: str, code: str
) -> None:
    with rig.server(cli, scenario, TIMEOUTS='{"idle_ms": 600, "first_byte_ms": 800}') as olp:
        resp = post(olp)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == DEFAULT_TEXT
    assert resp.headers["x-olp-provider-used"] == "beta"
    assert resp.headers["x-olp-fallback-hops"] == "1"
    [hop] = detail(resp)
    assert (hop["provider"], hop["code"], hop["trigger"]) == ("cli", code, "fallback")
    [run] = rig.runs()
    assert wait_gone(run["pid"], 3.0)


def test_never_ending_output_hits_the_total_timeout(rig: Rig) -> None:
    with rig.server("claude", "never_ends", TIMEOUTS='{"total_ms": 800}') as olp:
        resp = post(olp)
    assert resp.headers["x-olp-provider-used"] == "beta"
    assert detail(resp)[0]["code"] == "TIMEOUT"
    assert "total timeout" in detail(resp)[0]["message"]
    assert wait_gone(rig.runs()[0]["pid"], 3.0)


@pytest.mark.parametrize(
    ("cli", "scenario"), [("claude", "err_401_no_retries_env"), ("qwen", "err_401_default_retries")]
)
def test_auth_failure_is_502_and_does_not_fall_back(rig: Rig, cli: str, scenario: str) -> None:
    with rig.server(cli, scenario) as olp:
        resp = post(olp)
    assert resp.status_code == 502
    error = resp.json()["error"]
    assert error["code"] == "provider_auth_failed"
    assert error["provider"] == "cli"
    assert rig.beta.calls == 0


def test_missing_binary_falls_back_with_cli_not_found(rig: Rig) -> None:
    config = rig.config("claude", "success_stream_json_partial")
    config["providers"]["cli"]["command"] = str(rig.bin_dir / "no-such-claude")
    with olp_server(rig.tmp_path, config) as olp:
        resp = post(olp)
    assert resp.headers["x-olp-provider-used"] == "beta"
    assert detail(resp)[0]["code"] == "CLI_NOT_FOUND"


def _usage_limit_capture(tmp_path: Path, resets_at: int) -> Path:
    """The captured 5-hour limit, with its reset moved to `resets_at` (the capture's own
    reset may lie in the past on the machine running the test)."""
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    name = "sub_usage_limit_five_hour"
    src = FIXTURES / "claude"
    text = (src / f"{name}.jsonl").read_text().replace("1795977238", str(resets_at))
    (fixtures / f"{name}.jsonl").write_text(text)
    for ext in ("meta.json", "stderr.txt"):
        (fixtures / f"{name}.{ext}").write_bytes((src / f"{name}.{ext}").read_bytes())
    return fixtures


def test_usage_limit_cools_the_provider_down_until_its_reset(rig: Rig) -> None:
    resets_at = int(time.time()) + 3000
    fixtures = _usage_limit_capture(rig.tmp_path, resets_at)
    with rig.server("claude", "sub_usage_limit_five_hour", FAKE_CLI_FIXTURES=str(fixtures)) as olp:
        first = post(olp)
        assert first.headers["x-olp-provider-used"] == "beta"
        assert detail(first)[0]["code"] == "QUOTA_EXHAUSTED"
        assert "You've hit your session limit" in detail(first)[0]["message"]
        second = post(olp)
    assert second.status_code == 200
    skipped = detail(second)[0]
    assert (skipped["code"], skipped["trigger"]) == ("COOLDOWN", "skip")
    left = float(skipped["message"].split("cooling down for ")[1].split("s")[0])
    assert resets_at - time.time() - 5 <= left <= resets_at - time.time() + 1
    assert len(rig.runs()) == 1  # the second request spawned nothing
    assert rig.beta.calls == 2


def test_rate_limit_then_exhaustion_gives_retry_after(rig: Rig) -> None:
    config = rig.config("claude", "err_429_no_retries_env")
    config["routing"]["chains"]["sonnet"] = [{"provider": "cli", "model": "claude-sonnet-4-5"}]
    with olp_server(rig.tmp_path, config) as olp:
        resp = post(olp)
    assert resp.status_code == 429
    assert resp.json()["error"]["code"] == "all_providers_failed"
    assert int(resp.headers["retry-after"]) >= 1
    assert resp.headers["x-olp-fallback-exhausted"]


# -- death and salvage ------------------------------------------------------------------


@pytest.mark.parametrize("signal_name", ["", "KILL"])
@pytest.mark.parametrize("stream", [False, True])
def test_content_then_death_is_salvaged_as_length(rig: Rig, stream: bool, signal_name: str) -> None:
    env = {"FAKE_CLI_DIE_SIGNAL": signal_name} if signal_name else {}
    with rig.server("claude", "die_midstream", FAKE_CLI_CUT="6", **env) as olp:
        if stream:
            chunks = list(
                client(olp).chat.completions.create(
                    model="sonnet", messages=[{"role": "user", "content": "hi"}], stream=True
                )
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        else:
            resp = post(olp)
            assert resp.status_code == 200
            text = resp.json()["choices"][0]["message"]["content"]
            finish = resp.json()["choices"][0]["finish_reason"]
    assert text == "Hello from the fake "
    assert finish == "length"
    assert rig.beta.calls == 0


def test_death_before_content_falls_back(rig: Rig) -> None:
    with rig.server("claude", "die_midstream", FAKE_CLI_CUT="2") as olp:
        resp = post(olp)
    assert resp.headers["x-olp-provider-used"] == "beta"
    hop = detail(resp)[0]
    assert hop["code"] == "SPAWN_FAILED"
    assert "exited with status 1" in hop["message"]
    assert "died mid-stream" in hop["message"]  # the stderr tail


# -- isolation ----------------------------------------------------------------------------


def test_the_child_gets_argv_stdin_env_cwd_and_home_and_nothing_else(
    rig: Rig, owner_home: Path
) -> None:
    messages = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    with rig.server("claude", "success_stream_json_partial") as olp:
        # tool_choice "none": the tools are not offered (with tools, see test_real_claude_tools)
        resp = post(olp, messages=messages, tools=tools, tool_choice="none")
    assert resp.status_code == 200
    [run] = rig.runs()
    meta = json.loads((FIXTURES / "claude" / "success_stream_json_partial.meta.json").read_text())
    expected = meta["argv"][1:]
    at = expected.index("--system-prompt")
    del expected[at : at + 2]  # the system prompt comes on stdin (initialize)
    at = expected.index("--model")
    expected[at:at] = ["--input-format", "stream-json"]
    assert run["argv"] == expected
    init, user = (json.loads(line) for line in run["stdin"].splitlines())
    assert init["request"] == {"subtype": "initialize", "systemPrompt": "Be terse."}
    assert user["message"]["content"] == [{"type": "text", "text": "What is 2+2?"}]
    assert "get_weather" not in json.dumps(run["argv"]) + run["stdin"]
    env = run["env"]
    for leaked in ("OLP_OWNER_TOKEN", "OPENAI_API_KEY", "OLP_HOME"):
        assert leaked not in env
    assert SECRET not in json.dumps(env)
    assert env["TZ"] == "UTC"
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    assert env["HOME"] == run["home"] != str(owner_home)
    assert run["cwd_listing"] == []
    assert run["home_listing"] == {
        ".claude/.credentials.json": str(owner_home / ".claude" / ".credentials.json")
    }
    assert not Path(run["home"]).exists()  # removed afterwards
    assert run["pgid"] == run["pid"]


# -- no process left behind -------------------------------------------------------------


def _stream_first_chunk(
    server: ThreadServer, http: httpx.Client
) -> tuple[httpx.Response, Iterator[str]]:
    """Open a streamed request and read until the first content arrives; return it open
    with its line iterator (dropping the iterator would close the connection)."""
    req = http.build_request(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json={"model": "sonnet", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
    )
    resp = http.send(req, stream=True)
    lines = resp.iter_lines()
    for line in lines:
        if '"content"' in line:
            break
    return resp, lines


@pytest.mark.parametrize("scenario", ["spawn_grandchild", "ignore_sigterm"])
def test_client_disconnect_kills_the_whole_process_group(rig: Rig, scenario: str) -> None:
    with rig.server(
        "claude", scenario, FAKE_CLI_CUT="5", TIMEOUTS='{"idle_ms": 20000, "total_ms": 60000}'
    ) as olp:
        http = httpx.Client(timeout=20)
        resp, _lines = _stream_first_chunk(olp, http)
        [run] = rig.runs()
        pids = [run["pid"], *([run["grandchild_pid"]] if run["grandchild_pid"] else [])]
        assert not any(wait_gone(pid, 0.2) for pid in pids)  # alive while streaming
        resp.close()
        http.close()
        assert all(wait_gone(pid, 6.0) for pid in pids)


def test_timeout_after_content_kills_the_child(rig: Rig) -> None:
    with rig.server(
        "claude", "spawn_grandchild", FAKE_CLI_CUT="5", TIMEOUTS='{"idle_ms": 500}'
    ) as olp:
        resp = post(olp)
        [run] = rig.runs()
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["finish_reason"] == "length"
    assert wait_gone(run["pid"], 3.0)
    assert wait_gone(run["grandchild_pid"], 3.0)


def test_shutdown_kills_children_of_streams_in_flight(rig: Rig) -> None:
    server = rig.server(
        "claude",
        "spawn_grandchild",
        FAKE_CLI_CUT="5",
        TIMEOUTS='{"idle_ms": 60000, "total_ms": 120000}',
    )
    http = httpx.Client(timeout=30)
    with server as olp:
        opened = threading.Event()

        def stream() -> None:
            try:
                _, lines = _stream_first_chunk(olp, http)
                opened.set()
                for _ in lines:
                    pass
            except httpx.HTTPError:
                pass
            finally:
                opened.set()

        thread = threading.Thread(target=stream, daemon=True)
        thread.start()
        assert opened.wait(10)
        [run] = rig.runs()
        assert not wait_gone(run["pid"], 0.2)  # alive while the stream is open
    # Leaving the block shut OLP down.
    assert wait_gone(run["pid"], 10.0)
    assert wait_gone(run["grandchild_pid"], 10.0)
    thread.join(10)
    http.close()
