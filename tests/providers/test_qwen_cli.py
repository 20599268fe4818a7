"""qwen-cli translation against the real captures (tests/fixtures/cli/qwen)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from olp.config.model import ProviderConfig
from olp.errors import Failure, ProviderError
from olp.ir import ChatRequest, Event, Finish, Message, TextDelta, Tool, ToolCallDelta, Usage
from olp.providers._mcp_bridge import BridgedRun
from olp.providers._prompt import DEFAULT_SYSTEM_PROMPT
from olp.providers.qwen_cli import plugin
from olp.providers.qwen_cli.translate import (
    DROPS,
    QwenTranslator,
    auth_type,
    build_invocation,
    classify,
    run_settings,
)

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "qwen"
TEXT = "Hello from the fake upstream. 2+2=4."
NOW = 1_795_970_000.0
SESSION = "123e4567-e89b-12d3-a456-426614174000"


def feed_lines(lines: list[bytes], status: int | None = 0, stderr: str = "") -> list[Event]:
    tr = QwenTranslator("qwen", lambda: NOW)
    events: list[Event] = []
    for line in lines:
        events.extend(tr.feed(line))
        if tr.done:
            break
    events.extend(tr.end(None if tr.done else status, stderr))
    return events


def replay(name: str) -> list[Event]:
    meta = json.loads((CAPTURES / f"{name}.meta.json").read_text())
    lines = (CAPTURES / f"{name}.jsonl").read_bytes().splitlines()
    return feed_lines(lines, meta["exit_code"], (CAPTURES / f"{name}.stderr.txt").read_text())


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


@pytest.mark.parametrize(
    ("name", "prompt", "completion"),
    [
        # Without --bare Qwen Code made a second (memory) request: result counts both.
        ("success_stream_json_partial", 60, 24),
        ("success_stream_json_partial_bare_notools", 30, 12),
    ],
)
def test_streamed_success(name: str, prompt: int, completion: int) -> None:
    events = replay(name)
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    # Not held: "H" cannot start "[API Error: …".
    assert deltas == ["Hello from ", "the fake ", "upstream. 2+2=4."]
    assert events[-2] == Usage(prompt_tokens=prompt, completion_tokens=completion)
    assert events[-1] == Finish("stop")


def test_without_partial_messages_the_assistant_event_carries_the_text() -> None:
    events = replay("success_stream_json")
    assert text_of(events) == TEXT
    assert events[-1] == Finish("stop")


@pytest.mark.parametrize(
    ("name", "failure", "status"),
    [
        ("err_401_default_retries", Failure.AUTH_FAILED, 401),
        ("err_500_default_retries", Failure.UPSTREAM_ERROR, 500),
        ("err_conn_refused_default_retries", Failure.TRANSPORT, None),
    ],
)
def test_api_error_answers_with_exit_0_are_errors_not_content(
    name: str, failure: Failure, status: int | None
) -> None:
    tr = QwenTranslator("qwen", lambda: NOW)
    content: list[Event] = []
    for line in (CAPTURES / f"{name}.jsonl").read_bytes().splitlines():
        content.extend(tr.feed(line))
    assert not any(isinstance(e, TextDelta) for e in content)
    with pytest.raises(ProviderError) as info:
        tr.end(None, "")
    assert info.value.failure is failure
    assert info.value.upstream_status == status
    assert info.value.message.startswith("qwen: [API Error:")


@pytest.mark.parametrize("name", ["err_429_default_retries", "err_hang_killed_after_120s"])
def test_a_cli_that_never_answers_and_is_killed_is_spawn_failed(name: str) -> None:
    """Qwen Code retries a 429 for minutes: OLP's idle timeout ends it; if it is killed
    before any content, the hop failed."""
    lines = (CAPTURES / f"{name}.jsonl").read_bytes().splitlines()
    with pytest.raises(ProviderError) as info:
        feed_lines(lines, status=-15)
    assert info.value.failure is Failure.SPAWN_FAILED


def _stream(*pieces: str) -> list[bytes]:
    start = {"type": "stream_event", "event": {"type": "message_start", "message": {"id": "m"}}}
    lines = [json.dumps(start).encode()]
    for piece in pieces:
        delta = {"type": "content_block_delta", "delta": {"type": "text_delta", "text": piece}}
        lines.append(json.dumps({"type": "stream_event", "event": delta}).encode())
    return lines


def _result(text: str) -> bytes:
    doc = {"type": "result", "subtype": "success", "is_error": False, "result": text}
    return json.dumps(doc).encode()


def test_streamed_api_error_text_is_an_error() -> None:
    lines = [*_stream("[API", " Error: 429 ", "Too many requests]"), _result("[API Error: 429 x]")]
    with pytest.raises(ProviderError) as info:
        feed_lines(lines)
    assert info.value.failure is Failure.RATE_LIMITED


def test_answers_that_only_look_like_an_error_are_released() -> None:
    events = feed_lines([*_stream("[", "1, 2]", " is a list"), _result("[1, 2] is a list")])
    assert text_of(events) == "[1, 2] is a list"
    short = feed_lines([*_stream("["), _result("[")])
    assert text_of(short) == "["
    assert short[-1] == Finish("stop")


def test_content_then_death_is_salvaged() -> None:
    events = feed_lines(_stream("Hello there, ", "partial"), status=1, stderr="crash")
    assert text_of(events) == "Hello there, partial"
    assert events[-1] == Finish("length")


def test_garbage_only_is_spawn_failed() -> None:
    with pytest.raises(ProviderError) as info:
        feed_lines([b"\x00\xff", b"not json"], status=0)
    assert info.value.failure is Failure.SPAWN_FAILED
    assert "2 unparsable line(s)" in info.value.message


@pytest.mark.parametrize(
    ("text", "failure"),
    [
        ("[API Error: 429 Rate limit reached]", Failure.RATE_LIMITED),
        ("[API Error: 429 You exceeded your current quota]", Failure.QUOTA_EXHAUSTED),
        ("[API Error: Qwen OAuth quota exceeded: try tomorrow]", Failure.QUOTA_EXHAUSTED),
        ("[API Error: 503 busy]", Failure.OVERLOADED),
        ("[API Error: 400 bad]", Failure.INVALID_REQUEST),
        ("[API Error: 502 bad gateway]", Failure.UPSTREAM_ERROR),
        ("[API Error: Request timed out.]", Failure.TIMEOUT),
        ("[API Error: Connection error. (cause: fetch failed)]", Failure.TRANSPORT),
    ],
)
def test_classify(text: str, failure: Failure) -> None:
    assert classify("qwen", text, NOW).failure is failure


def test_invocation() -> None:
    req = ChatRequest(
        model="qwen3-coder-plus",
        messages=(Message("system", "Be terse."), Message("user", "What is 2+2?")),
        max_tokens=50,
        temperature=0.2,
    )
    inv = build_invocation(
        req, {"OPENAI_API_KEY": "sk", "OPENAI_BASE_URL": "http://x/v1"}, session_id=SESSION
    )
    assert inv.args == (
        "--output-format", "stream-json",
        "--include-partial-messages",
        "--chat-recording", "false",
        "--max-session-turns", "1",
        "--auth-type", "openai",
        "-m", "qwen3-coder-plus",
        "--session-id", SESSION,
        "--system-prompt", "Be terse.",
    )  # fmt: skip
    # Not --bare (no MCP server, usage statistics on): OLP's settings instead, which are
    # the system settings and defaults too, so the machine's (which would win, or be
    # merged in) are not read; that path is relative to the working directory, a sibling
    # of HOME.
    assert inv.home_files == {".qwen/settings.json": run_settings(None)}
    assert inv.env == {
        "QWEN_CODE_SYSTEM_SETTINGS_PATH": "../home/.qwen/settings.json",
        "QWEN_CODE_SYSTEM_DEFAULTS_PATH": "../home/.qwen/settings.json",
        "QWEN_CODE_MAX_OUTPUT_TOKENS": "50",
    }
    # The run's debug log (where its retry notices go) is the child's stderr; the
    # output-language rule Qwen Code would add to the system prompt is empty.
    assert inv.home_links == {
        f".qwen/debug/{SESSION}.txt": "/dev/stderr",
        ".qwen/output-language.md": "/dev/null",
    }
    assert inv.stdin == b"What is 2+2?"  # on stdin: no positional prompt
    # No `.env` of a directory above the working one is read: the search stops here.
    assert inv.work_files == {".env": b""}
    assert inv.credentials == ((".qwen/oauth_creds.json", ".qwen/oauth_creds.json"),)
    bare = build_invocation(
        req.__class__(model="m", messages=(Message("user", "hi"),)), {}, session_id=SESSION
    )
    assert bare.args[-1] == DEFAULT_SYSTEM_PROMPT
    assert "qwen-oauth" in bare.args


def test_auth_type_follows_the_configured_env() -> None:
    assert auth_type({}) == "qwen-oauth"
    assert auth_type({"OPENAI_API_KEY": "k"}) == "openai"
    assert auth_type({"ANTHROPIC_API_KEY": "k"}) == "anthropic"
    assert auth_type({"GEMINI_API_KEY": "k"}) == "gemini"


def test_plugin() -> None:
    provider = plugin.factory(ProviderConfig("qwen", "qwen-cli"))
    assert plugin.type == "qwen-cli"
    assert provider.capabilities.drops == DROPS
    assert "temperature" in DROPS
    assert "max_tokens" not in DROPS
    assert "tools (client-side function calling)" not in DROPS  # bridged over MCP
    assert provider.capabilities.tools is True
    assert provider.capabilities.tool_choices == {"auto", "none"}
    assert provider.quota() is None


# Lines Qwen Code 0.15.10 wrote to its debug log while it retried a 429 (real run).
RETRY_429 = (
    b"2026-12-02T03:21:08.692Z [WARN] [RETRY] Attempt 1 failed with status 429. "
    b"Retrying with backoff... Error: 429 slow down"
)
DEBUG_LOG = (
    "2026-12-02T03:21:04.549Z [INFO] Config initialization started\n"
    "2026-12-02T03:21:08.641Z [ERROR] [OPENAI_ERROR] OpenAI API Error: 429 slow down\n"
    "    at retry (file:///qwen/cli.js:1:1)\n"
    "real trouble: node crashed\n"
)


@pytest.mark.parametrize(
    ("line", "failure"),
    [
        (RETRY_429, Failure.RATE_LIMITED),
        (
            b"2026-12-02T03:21:08.692Z [WARN] [RETRY] Attempt 2 failed with status 429. "
            b"Retrying with backoff... Error: 429 You exceeded your current quota",
            Failure.QUOTA_EXHAUSTED,
        ),
        (
            b"2026-12-02T03:21:08.692Z [ERROR] [RETRY] Attempt 1 failed with status 503. "
            b"Retrying with backoff... Error: 503 busy",
            Failure.OVERLOADED,
        ),
        (
            b"2026-12-02T03:21:08.692Z [WARN] [RETRY] Attempt 1 failed with status 429. "
            b"Retrying after explicit delay of 20000ms...",
            Failure.RATE_LIMITED,
        ),
    ],
)
def test_a_retry_notice_on_stderr_is_the_failure(line: bytes, failure: Failure) -> None:
    err = QwenTranslator("qwen", lambda: NOW).feed_stderr(line)
    assert err is not None
    assert err.failure is failure
    assert err.message.startswith("qwen: [API Error: ")


def test_other_stderr_lines_are_not_failures() -> None:
    tr = QwenTranslator("qwen", lambda: NOW)
    for line in DEBUG_LOG.encode().splitlines():
        assert tr.feed_stderr(line) is None


def test_the_debug_log_stays_out_of_error_messages() -> None:
    with pytest.raises(ProviderError) as info:
        feed_lines([], status=1, stderr=DEBUG_LOG)
    assert "real trouble: node crashed" in info.value.message
    assert "OPENAI_ERROR" not in info.value.message
    assert "at retry" not in info.value.message


# -- client tools through the MCP bridge ---------------------------------------------------

URL = "http://127.0.0.1:1/secret/mcp"
TOOLS = (Tool("get_weather"), Tool("get_time"))


def ask(**kw: Any) -> ChatRequest:
    return ChatRequest(model="qwen3-coder-plus", messages=(Message("user", "weather?"),), **kw)


def test_tools_the_model_may_not_call_are_not_sent() -> None:
    inv = build_invocation(ask(tools=TOOLS, tool_choice="none"), {}, session_id=SESSION)
    assert b"get_weather" not in inv.stdin
    assert not any("get_weather" in a for a in inv.args)
    assert b"get_weather" not in inv.home_files[".qwen/settings.json"]
    assert "mcpServers" not in json.loads(inv.home_files[".qwen/settings.json"])


def test_a_bridged_run_has_the_bridge_as_its_only_mcp_server() -> None:
    run = BridgedRun(TOOLS)
    inv = build_invocation(ask(tools=TOOLS), {}, session_id=SESSION, tools_run=run)
    args = list(inv.args)
    # One turn to answer, one more after arguments off the schema.
    assert args[args.index("--max-session-turns") + 1] == "2"
    assert inv.tools_run is run
    assert inv.mcp_files is not None
    assert inv.mcp_files(URL) == {".qwen/settings.json": run_settings(URL)}
    assert URL not in " ".join(args)  # the secret URL is only in the private HOME
    settings = json.loads(run_settings(URL))
    assert settings["mcpServers"] == {"olp": {"httpUrl": URL, "trust": True}}


def test_run_settings_keep_qwen_codes_own_parts_out() -> None:
    settings = json.loads(run_settings(None))
    # An allow-list of core tools naming none of them: every built-in is off.
    assert settings["tools"]["core"] == ["none"]
    assert "tool_search" in settings["permissions"]["deny"]  # MCP tools are not deferred
    assert settings["context"]["fileName"] == "OLP-NO-CONTEXT-FILE.md"  # no QWEN.md
    assert settings["memory"]["enableManagedAutoMemory"] is False
    assert settings["model"] == {"skipStartupContext": True, "skipNextSpeakerCheck": True}
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["telemetry"]["enabled"] is False
    assert settings["$version"] == 4  # current: Qwen Code does not rewrite the file


def tool_replay(**kw: Any) -> tuple[list[Event], int]:
    """The real CLI's output for two bridged tool calls (captured with the real 0.15.10)."""
    tr = QwenTranslator(
        "qwen", lambda: NOW, tool_schemas={"get_weather": None, "get_time": None}, **kw
    )
    read = 0
    events: list[Event] = []
    for line in (CAPTURES / "tool_use_parallel_bridged.jsonl").read_bytes().splitlines():
        read += 1
        events.extend(tr.feed(line))
        if tr.done:
            break
    return [*events, *tr.end(None, "")], read


def test_bridged_tool_calls_are_the_answer_under_the_clients_names() -> None:
    events, read = tool_replay()
    lines = (CAPTURES / "tool_use_parallel_bridged.jsonl").read_bytes().splitlines()
    assert read == len(lines)  # done at message_stop: the CLI is not left to call them
    assert events == [
        ToolCallDelta(0, "call_fake_0", "get_weather", '{"city":"Paris"}'),
        ToolCallDelta(1, "call_fake_1", "get_time", '{"tz":"CET"}'),
        Usage(prompt_tokens=12, completion_tokens=7),  # from the finished message
        Finish("tool_calls"),
    ]


def test_parallel_tool_calls_false_answers_the_first_call_only() -> None:
    events, _ = tool_replay(parallel_tool_calls=False)
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls == [ToolCallDelta(0, "call_fake_0", "get_weather", '{"city":"Paris"}')]
    assert events[-1] == Finish("tool_calls")


def test_without_a_bridge_tool_use_blocks_are_not_client_tool_calls() -> None:
    tr = QwenTranslator("qwen", lambda: NOW)
    for line in (CAPTURES / "tool_use_parallel_bridged.jsonl").read_bytes().splitlines():
        assert not [e for e in tr.feed(line) if isinstance(e, ToolCallDelta)]
    assert not tr.done


def test_a_turn_off_the_schema_then_out_of_turns_is_an_error_that_says_so() -> None:
    retried: list[int] = []
    schemas = {
        "get_weather": {"type": "object", "properties": {"city": {"type": "integer"}}},
        "get_time": None,
    }
    tr = QwenTranslator("qwen", lambda: NOW, tool_schemas=schemas, on_retry=retried.append)
    events: list[Event] = []
    for line in (CAPTURES / "tool_use_parallel_bridged.jsonl").read_bytes().splitlines():
        events.extend(tr.feed(line))
    assert not tr.done  # reading on: the model was told, its next turn may answer
    assert not [e for e in events if isinstance(e, ToolCallDelta)]
    # Qwen Code refused the call off its schema itself; the other reached the bridge and
    # is let go.
    assert retried == [1]
    # Qwen Code's word when the next turn would be one too many: stderr, exit 53.
    with pytest.raises(ProviderError) as caught:
        tr.end(53, "Reached max session turns for this session.")
    assert caught.value.message == (
        "qwen: the model's tool call is invalid (after one retry: "
        "get_weather: /city: 'Paris' is not of type 'integer')"
    )


def test_a_tool_name_qwen_code_shortens_is_the_clients_again() -> None:
    long_name = "lookup_the_current_weather_conditions_for_a_given_city_x"  # 56 characters
    # Qwen Code's name for it: `mcp__olp__<name>` is longer than 63, so it keeps the first
    # 28 and the last 32 characters.
    cli_name = "mcp__olp__lookup_the_current___er_conditions_for_a_given_city_x"
    assert len(cli_name) == 63
    message = {
        "id": "m1",
        "content": [{"type": "tool_use", "id": "call_1", "name": cli_name, "input": {}}],
    }
    lines = [
        json.dumps({"type": "assistant", "message": message}).encode(),
        json.dumps({"type": "stream_event", "event": {"type": "message_stop"}}).encode(),
    ]
    tr = QwenTranslator("qwen", lambda: NOW, tool_schemas={long_name: None})
    events = [event for line in lines for event in tr.feed(line)]
    assert events == [ToolCallDelta(0, "call_1", long_name, "{}")]
