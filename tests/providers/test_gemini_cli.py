"""gemini-cli translation, pure: IR → argv/settings.json/env, and every captured
`gemini -p --output-format stream-json` run (stdout, stderr, exit status) → IR events or
a taxonomy code with its reset time. Captures: gemini-cli 0.61.0 (tests/fixtures/cli/gemini)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import orjson
import pytest

from olp.errors import Failure, ProviderError
from olp.ir import Event, Finish, TextDelta, ToolCallDelta, Usage
from olp.providers.gemini_cli import translate
from olp.providers.gemini_cli.events import (
    GeminiStream,
    GeminiTools,
    classify,
    next_midnight,
    status_from_exit,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "cli" / "gemini"
ANSWER = "Hello from the fake upstream. 2+2=4."


def run(name: str) -> list[Event]:
    meta = orjson.loads((FIXTURES / f"{name}.meta.json").read_bytes())
    stream = GeminiStream("gemini")
    events: list[Event] = []
    for line in (FIXTURES / f"{name}.jsonl").read_bytes().splitlines():
        events += stream.feed(line)
        if stream.done:
            return events + stream.end(None, "")
    stderr = (FIXTURES / f"{name}.stderr.txt").read_text()
    return events + stream.end(int(meta["exit_code"]), stderr)


def failure_of(name: str) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        run(name)
    return info.value


# -- what gemini is given ---------------------------------------------------------------


def test_argv_streams_json_and_keeps_the_prompt_off_argv() -> None:
    args = translate.argv("gemini-2.5-flash")
    assert args == ("-p", "", "--output-format", "stream-json", "--model=gemini-2.5-flash")
    assert translate.argv("-x")[-1] == "--model=-x"  # never a flag


def test_settings_turn_retries_tools_and_telemetry_off() -> None:
    doc = translate.settings("gemini-api-key")
    assert doc["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert doc["general"]["maxAttempts"] == 1
    assert doc["general"]["retryFetchErrors"] is False
    assert doc["tools"]["core"] == ["__none__"]
    assert doc["model"]["maxSessionTurns"] == 1
    assert doc["telemetry"]["enabled"] is False
    assert doc["privacy"]["usageStatisticsEnabled"] is False
    assert doc["general"]["enableAutoUpdate"] is False


@pytest.mark.parametrize(
    ("env", "auth"),
    [
        ({"GEMINI_API_KEY": "k"}, "gemini-api-key"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "true"}, "vertex-ai"),
        ({}, "oauth-personal"),
    ],
)
def test_auth_type_follows_the_providers_env(env: dict[str, str], auth: str) -> None:
    assert translate.auth_type(env) == auth


def test_system_text_replaces_geminis_system_prompt_through_a_private_file() -> None:
    files = translate.home_files("oauth-personal", "Be terse.")
    assert files[translate.SYSTEM_FILE] == b"Be terse."
    assert orjson.loads(files[translate.SETTINGS_FILE])["model"]["maxSessionTurns"] == 1
    assert translate.child_env("Be terse.")["GEMINI_SYSTEM_MD"] == "~/.gemini/system.md"
    assert "GEMINI_SYSTEM_MD" not in translate.child_env("")
    assert translate.SYSTEM_FILE not in translate.home_files("oauth-personal", "")


def test_the_machines_system_settings_are_the_runs_own_file() -> None:
    # Relative to the working directory, HOME's sibling: /etc/gemini-cli's settings (which
    # win) and defaults (merged in) cannot add tools or MCP servers to a run.
    env = translate.child_env("")
    own = "../home/" + translate.SETTINGS_FILE
    assert env["GEMINI_CLI_SYSTEM_SETTINGS_PATH"] == own
    assert env["GEMINI_CLI_SYSTEM_DEFAULTS_PATH"] == own


def test_bridged_tools_are_the_only_tools_and_get_a_second_turn() -> None:
    doc = translate.settings("gemini-api-key", "http://127.0.0.1:9/secret/mcp")
    assert doc["mcpServers"] == {"olp": {"httpUrl": "http://127.0.0.1:9/secret/mcp"}}
    assert doc["mcp"]["allowed"] == ["olp"]
    assert doc["tools"]["core"] == ["mcp_olp_*"]
    assert doc["model"]["maxSessionTurns"] == 2
    plain = translate.settings("gemini-api-key")
    assert (plain["mcpServers"], plain["mcp"]["allowed"]) == ({}, [])


def test_tool_names_are_the_clis() -> None:
    assert translate.gemini_tool_name("get_weather") == "mcp_olp_get_weather"
    long = translate.gemini_tool_name("x" * 60)
    assert len(long) == 63 and long.startswith("mcp_olp_x") and "..." in long


# -- tool calls -------------------------------------------------------------------------

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def tools(retries: list[int] | None = None, *, parallel: bool = True) -> GeminiTools:
    return GeminiTools(
        names={"mcp_olp_get_weather": "get_weather", "mcp_olp_get_time": "get_time"},
        schemas={"get_weather": WEATHER, "get_time": None},
        parallel=parallel,
        on_retry=(retries if retries is not None else []).append,
    )


def tool_use(name: str, args: dict[str, object], tool_id: str | None = None) -> bytes:
    made_up = f"{name}__{name}_1796192130845_0"
    doc = {"type": "tool_use", "tool_name": name, "tool_id": tool_id or made_up}
    return orjson.dumps({**doc, "parameters": args})


TOOL_RESULT = b'{"type":"tool_result","tool_id":"x","status":"error"}'


def test_calls_are_the_answer_once_the_bridge_is_called() -> None:
    stream = GeminiStream("gemini", tools())
    assert stream.feed(b'{"type":"message","role":"assistant","content":"Let me","delta":true}')
    assert stream.feed(tool_use("mcp_olp_get_weather", {"city": "Paris"}, "x__id-1")) == []
    assert stream.feed(tool_use("mcp_olp_get_time", {"wait_for_previous": True})) == []
    assert not stream.done  # more calls may come, until the bridge is called
    events = stream.woken()
    assert stream.done
    assert events == [
        ToolCallDelta(0, "x__id-1", "get_weather", '{"city":"Paris"}'),
        ToolCallDelta(1, "call_1796192130845_0", "get_time", "{}"),  # not the CLI's parameter
        Finish("tool_calls"),
    ]


def test_the_models_own_call_id_is_kept() -> None:
    stream = GeminiStream("gemini", tools())
    stream.feed(tool_use("mcp_olp_get_time", {}, "mcp_olp_get_time__fc-7"))
    assert stream.woken()[0] == ToolCallDelta(0, "fc-7", "get_time", "{}")


def test_parallel_tool_calls_false_answers_the_first_call() -> None:
    stream = GeminiStream("gemini", tools(parallel=False))
    stream.feed(tool_use("mcp_olp_get_weather", {"city": "Paris"}))
    stream.feed(tool_use("mcp_olp_get_time", {}))
    assert [type(e) for e in stream.woken()] == [ToolCallDelta, Finish]


def test_a_wake_without_calls_is_nothing() -> None:
    stream = GeminiStream("gemini", tools())
    assert stream.woken() == [] and not stream.done


def test_a_refused_turn_is_retried_once_then_an_error() -> None:
    retries: list[int] = []
    stream = GeminiStream("gemini", tools(retries))
    stream.feed(tool_use("mcp_olp_get_weather", {"city": 75}))
    stream.feed(tool_use("mcp_olp_get_time", {}))
    assert stream.woken() == [] and not stream.done
    assert retries == [1]  # the valid call is the one the bridge holds
    assert stream.feed(TOOL_RESULT) == []  # the let-go calls' results: not a turn
    stream.feed(tool_use("mcp_olp_launch_rockets", {}))
    with pytest.raises(ProviderError) as info:
        stream.feed(TOOL_RESULT)  # a tool the CLI does not have: it answers at once
    assert info.value.failure is Failure.UPSTREAM_ERROR
    assert "after one retry: launch_rockets: not one of the request's tools" in info.value.message


def test_a_retried_turn_may_answer() -> None:
    stream = GeminiStream("gemini", tools())
    stream.feed(tool_use("mcp_olp_get_weather", {}))
    stream.feed(TOOL_RESULT)
    stream.feed(tool_use("mcp_olp_get_weather", {"city": "Paris"}))
    assert stream.woken()[0] == ToolCallDelta(
        0, "call_1796192130845_0", "get_weather", '{"city":"Paris"}'
    )


# -- captured runs ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["success_stream_json", "success_stream_json_notools"])
def test_success_streams_deltas_then_usage_then_stop(name: str) -> None:
    events = run(name)
    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta("Hello from "),
        TextDelta("the fake "),
        TextDelta("upstream. 2+2=4."),
    ]
    assert events[-2:] == [Usage(prompt_tokens=30, completion_tokens=12), Finish("stop")]


@pytest.mark.parametrize(
    ("name", "failure", "status"),
    [
        ("err_429_default_retries", Failure.RATE_LIMITED, 429),
        ("err_500_default_retries", Failure.UPSTREAM_ERROR, 500),
        ("err_503_default_retries", Failure.OVERLOADED, 503),
        ("err_401_default_retries", Failure.AUTH_FAILED, 401),
        ("err_conn_refused_default_retries", Failure.TRANSPORT, None),
        ("err_usage_limit_default_retries", Failure.QUOTA_EXHAUSTED, 429),
    ],
)
def test_each_captured_error_lands_on_its_taxonomy_code(
    name: str, failure: Failure, status: int | None
) -> None:
    error = failure_of(name)
    assert (error.failure, error.upstream_status) == (failure, status)
    assert "[API Error:" in error.message


def test_per_day_quota_resets_at_the_next_midnight_pacific() -> None:
    error = failure_of("err_usage_limit_default_retries")
    assert error.reset_at is not None
    reset = datetime.fromtimestamp(error.reset_at, ZoneInfo("America/Los_Angeles"))
    assert (reset.hour, reset.minute) == (0, 0)
    assert 0 < error.reset_at - datetime.now(UTC).timestamp() <= 25 * 3600


def test_a_hang_gives_no_answer_and_no_verdict() -> None:
    stream = GeminiStream("gemini")
    for line in (FIXTURES / "err_hang_killed_after_120s.jsonl").read_bytes().splitlines():
        assert stream.feed(line) == []
    assert not stream.done  # OLP's own timeout decides


def test_exit_status_is_the_http_status_modulo_256() -> None:
    assert [status_from_exit(s) for s in (173, 244, 247, 145, 17)] == [429, 500, 503, 401, 529]
    assert status_from_exit(1) is None and status_from_exit(0) is None


@pytest.mark.parametrize(
    ("status", "message", "failure"),
    [
        (41, "Invalid auth method selected.", Failure.AUTH_FAILED),
        (42, "No input provided via stdin.", Failure.INVALID_REQUEST),
        (1, "Please set an Auth method in your settings.json", Failure.AUTH_FAILED),
        (1, "[API Error: exception TypeError: fetch failed sending request]", Failure.TRANSPORT),
        (1, "[API Error: Request timed out]", Failure.TIMEOUT),
        (1, "[API Error: something odd]", Failure.UPSTREAM_ERROR),
        (134, "", Failure.SPAWN_FAILED),
    ],
)
def test_non_http_exits(status: int, message: str, failure: Failure) -> None:
    assert classify("g", status, message).failure is failure


def test_429_texts_rate_limit_or_quota() -> None:
    now = datetime(2026, 11, 29, 20, 0, tzinfo=UTC).timestamp()
    plain = classify(
        "g", 173, "[API Error: Resource has been exhausted (e.g. check quota).]", now=now
    )
    assert (plain.failure, plain.retry_after, plain.reset_at) == (Failure.RATE_LIMITED, None, None)
    minute = classify("g", 173, "Quota exceeded for quota metric 'requests per minute'", now=now)
    assert (minute.failure, minute.retry_after) == (Failure.RATE_LIMITED, 60.0)
    soon = classify(
        "g",
        173,
        "You have exhausted your capacity on this model. Your quota will reset after 5s.",
        now=now,
    )
    assert (soon.failure, soon.reset_at) == (Failure.QUOTA_EXHAUSTED, now + 5)
    retry = classify("g", 173, "Too many requests. Your quota will reset after 1m30s.", now=now)
    assert (retry.failure, retry.retry_after) == (Failure.RATE_LIMITED, 90.0)
    daily = classify("g", 173, "You have exhausted your daily quota on this model.", now=now)
    assert daily.failure is Failure.QUOTA_EXHAUSTED
    assert daily.reset_at == datetime(2026, 11, 30, 8, 0, tzinfo=UTC).timestamp()  # 00:00 PST


def test_next_midnight_in_utc_when_the_text_says_so() -> None:
    now = datetime(2026, 11, 29, 20, 0, tzinfo=UTC).timestamp()
    assert next_midnight(now, True) == datetime(2026, 11, 30, tzinfo=UTC).timestamp()


def test_content_then_an_error_result_is_salvaged() -> None:
    stream = GeminiStream("gemini")
    delta = {"type": "message", "role": "assistant", "content": "partial", "delta": True}
    error = {"type": "result", "status": "error", "error": {"message": "[API Error: x]"}}
    assert stream.feed(orjson.dumps(delta)) == [TextDelta("partial")]
    assert stream.feed(orjson.dumps(error)) == []
    assert stream.end(244, "") == [Finish("length")]


def test_noise_is_ignored() -> None:
    stream = GeminiStream("gemini")
    for line in (b"", b"Warning: Basic terminal detected", b'{"type": "tool_use"}', b"[1]"):
        assert stream.feed(line) == []


def test_a_whole_message_after_deltas_is_not_repeated() -> None:
    stream = GeminiStream("gemini")
    delta = {"type": "message", "role": "assistant", "content": "Hi ", "delta": True}
    whole = {"type": "message", "role": "assistant", "content": "Hi there"}
    assert stream.feed(orjson.dumps(delta)) == [TextDelta("Hi ")]
    assert stream.feed(orjson.dumps(whole)) == []
    assert GeminiStream("g").feed(orjson.dumps(whole)) == [TextDelta("Hi there")]
