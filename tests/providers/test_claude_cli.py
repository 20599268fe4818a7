"""claude-cli translation against the real captures (tests/fixtures/cli/claude).

Pure: every captured stdout is fed line by line to the translator, then `end()` gets the
captured exit status and stderr — as `stream_cli` does with a live process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from olp.config.model import ProviderConfig, Timeouts
from olp.errors import Failure, ProviderError
from olp.ir import (
    ChatRequest,
    Event,
    Finish,
    Message,
    ReasoningDelta,
    ResponseFormat,
    TextDelta,
    Tool,
    ToolCallDelta,
    Usage,
)
from olp.providers._claude_stream import RateLimitInfo
from olp.providers._mcp_bridge import BridgedRun
from olp.providers._subprocess import CliInvocation
from olp.providers.claude_cli import plugin
from olp.providers.claude_cli.translate import (
    DEFAULT_SYSTEM_PROMPT,
    DROPS,
    ClaudeTranslator,
    build_invocation,
    classify,
)

CAPTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "claude"
TEXT = "Hello from the fake upstream. 2+2=4."
NOW = 1_795_970_000.0  # 2026-11-29 16:33 UTC, shortly before the captured resets


def replay(name: str) -> tuple[list[Event], ClaudeTranslator, list[RateLimitInfo]]:
    """Feed a capture through the translator; raise what `end()` raises."""
    seen: list[RateLimitInfo] = []
    tr = ClaudeTranslator("claude", lambda: NOW, seen.append)
    meta = json.loads((CAPTURES / f"{name}.meta.json").read_text())
    events: list[Event] = []
    for line in (CAPTURES / f"{name}.jsonl").read_bytes().splitlines():
        events.extend(tr.feed(line))
        if tr.done:
            break
    status = None if tr.done else meta["exit_code"]
    stderr = (CAPTURES / f"{name}.stderr.txt").read_text()
    events.extend(tr.end(status, stderr))
    return events, tr, seen


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def error_of(name: str) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        replay(name)
    return info.value


@pytest.mark.parametrize(
    "name",
    [
        "success_stream_json_partial",
        "success_arbitrary_model_name",
        "success_auth_token_bearer",
        "success_unified_headers_warning",
        "success_input_stream_json",
        "sub_success_plain",
        "sub_success_allowed_warning",
    ],
)
def test_streamed_success_is_token_deltas_then_usage_and_finish(name: str) -> None:
    events, tr, _ = replay(name)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert [d.text for d in deltas] == ["Hello from ", "the fake ", "upstream. 2+2=4."]
    usage, finish = events[-2:]
    assert isinstance(usage, Usage)
    assert usage.prompt_tokens == 25
    assert usage.completion_tokens == 12
    assert usage.cost_usd is not None and usage.cost_usd > 0
    assert finish == Finish("stop")
    assert tr.done


def test_without_partial_messages_the_assistant_event_carries_the_text() -> None:
    events, _, _ = replay("success_stream_json_verbose")
    assert events[0] == TextDelta(TEXT)
    assert events[-1] == Finish("stop")


def test_thinking_streams_as_reasoning_and_nothing_is_doubled() -> None:
    events, _, _ = replay("success_stream_json_partial_with_thinking")
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == "The user asks for 2+2. That is 4."
    assert text_of(events) == TEXT
    assert isinstance(events[0], ReasoningDelta)


def test_silent_non_streaming_retry_after_a_stall_is_emitted_once() -> None:
    events, _, _ = replay("err_hang_midstream_idle_timeout")
    assert text_of(events) == TEXT
    assert events[-1] == Finish("stop")


def test_first_result_ends_the_answer() -> None:
    events, tr, _ = replay("input_stream_json_with_assistant_history")
    assert text_of(events) == TEXT
    assert tr.done


@pytest.mark.parametrize(
    ("name", "failure", "status"),
    [
        ("err_401_no_retries_env", Failure.AUTH_FAILED, 401),
        ("err_401_x_should_retry_false", Failure.AUTH_FAILED, 401),
        ("err_401", Failure.AUTH_FAILED, 401),
        ("err_429_no_retries_env", Failure.RATE_LIMITED, 429),
        ("err_429_default_retries", Failure.RATE_LIMITED, 429),
        ("err_429_retry_after_120", Failure.RATE_LIMITED, 429),
        ("err_usage_limit_unified_429_no_retries_env", Failure.RATE_LIMITED, 429),
        ("sub_429_plain_no_unified_headers", Failure.RATE_LIMITED, 429),
        ("err_500_no_retries_env", Failure.UPSTREAM_ERROR, 500),
        ("err_500_default_retries", Failure.UPSTREAM_ERROR, 500),
        ("err_529_no_retries_env", Failure.OVERLOADED, 529),
        ("err_529_default_retries", Failure.OVERLOADED, 529),
        ("sub_529_default_retries", Failure.OVERLOADED, 529),
        ("err_conn_refused_no_retries_env", Failure.TRANSPORT, None),
        ("err_conn_refused_default_retries", Failure.TRANSPORT, None),
        ("err_hang_api_timeout_5s_1retry", Failure.TIMEOUT, None),
    ],
)
def test_captured_errors_land_on_the_taxonomy(
    name: str, failure: Failure, status: int | None
) -> None:
    err = error_of(name)
    assert err.failure is failure
    assert err.upstream_status == status
    assert err.provider == "claude"
    assert err.message.startswith("claude: ")
    assert err.reset_at is None


@pytest.mark.parametrize(
    ("name", "reset_at", "kind"),
    [
        ("sub_usage_limit_five_hour", 1795977238.0, "five_hour"),
        ("sub_usage_limit_seven_day", 1796322839.0, "seven_day"),
    ],
)
def test_usage_limits_are_quota_exhausted_until_the_signalled_reset(
    name: str, reset_at: float, kind: str
) -> None:
    with pytest.raises(ProviderError) as info:
        replay(name)
    err = info.value
    assert err.failure is Failure.QUOTA_EXHAUSTED
    assert err.reset_at == reset_at
    assert "You've hit your" in err.message
    assert err.http_status == 502


def test_rate_limit_events_are_reported_for_quota() -> None:
    _, _, seen = replay("sub_success_allowed_warning")
    assert seen == [RateLimitInfo("allowed", 1795970041.0, "five_hour", None)]


def test_usage_limit_text_alone_gives_the_reset_time() -> None:
    """Older CLIs print no rate_limit_event: the reset comes from the text (TZ=UTC)."""
    now = 1795977238.0 - 3600
    err = classify(
        "claude",
        text="You've hit your session limit · resets 6:33pm (UTC)",
        status=429,
        kind="rate_limit",
        rate_limit=None,
        now=now,
    )
    assert err.failure is Failure.QUOTA_EXHAUSTED
    assert err.reset_at == 1795977180.0  # 18:33:00 UTC that day
    weekly = classify(
        "claude",
        text="You've hit your weekly limit · resets Dec 3, 6:33pm (UTC)",
        status=429,
        kind="rate_limit",
        rate_limit=None,
        now=now,
    )
    assert weekly.reset_at == 1796322780.0


@pytest.mark.parametrize(
    ("text", "status", "kind", "failure"),
    [
        ("Not logged in · Please run /login", None, None, Failure.AUTH_FAILED),
        ("API Error: 403 forbidden", 403, "unknown", Failure.AUTH_FAILED),
        ("Invalid model", 404, "model_not_found", Failure.INVALID_REQUEST),
        ("prompt is too long", 400, "invalid_request", Failure.INVALID_REQUEST),
        ("Credit balance is too low", None, "billing_error", Failure.QUOTA_EXHAUSTED),
        ("API Error: 503 overloaded", 503, "server_error", Failure.OVERLOADED),
        ("Claude AI usage limit reached|1750708800", None, "rate_limit", Failure.QUOTA_EXHAUSTED),
        ("something odd", None, "unknown", Failure.UPSTREAM_ERROR),
    ],
)
def test_classify_table(text: str, status: int | None, kind: str, failure: Failure) -> None:
    err = classify("claude", text=text, status=status, kind=kind, rate_limit=None, now=NOW)
    assert err.failure is failure


def test_no_output_and_exit_1_is_spawn_failed_with_stderr() -> None:
    err = error_of("success_stream_json_no_verbose")
    assert err.failure is Failure.SPAWN_FAILED
    assert "exited with status 1" in err.message
    assert "requires --verbose" in err.message


def test_killed_before_any_content_is_spawn_failed() -> None:
    tr = ClaudeTranslator("claude", lambda: NOW)
    for line in (CAPTURES / "err_hang_midstream_killed_after_60s.jsonl").read_bytes().splitlines():
        assert tr.feed(line) == []
    with pytest.raises(ProviderError) as info:
        tr.end(-9, "")
    assert info.value.failure is Failure.SPAWN_FAILED
    assert "killed by signal 9" in info.value.message


def test_content_then_death_is_salvaged_as_length() -> None:
    tr = ClaudeTranslator("claude", lambda: NOW)
    lines = (CAPTURES / "success_stream_json_partial.jsonl").read_bytes().splitlines()
    events: list[Event] = []
    for line in lines[:5]:
        events.extend(tr.feed(line))
    assert events == [TextDelta("Hello from ")]
    assert tr.end(1, "boom") == [Finish("length")]


def test_unparsable_lines_are_skipped_but_no_result_is_an_error() -> None:
    tr = ClaudeTranslator("claude", lambda: NOW)
    for line in (b"\x00\xff garbage", b"[1, 2]", b'{"type": "weird"}', b""):
        assert tr.feed(line) == []
    with pytest.raises(ProviderError) as info:
        tr.end(0, "")
    assert info.value.failure is Failure.SPAWN_FAILED
    assert "without a result event (2 unparsable line(s) on stdout)" in info.value.message


# -- invocation --------------------------------------------------------------------------


def request(*messages: Message, **kw: Any) -> ChatRequest:
    return ChatRequest(model="claude-sonnet-4-5", messages=messages, **kw)


def stdin_lines(inv: CliInvocation) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `initialize` control request and the user message the CLI reads."""
    init, user = (json.loads(line) for line in inv.stdin.decode().splitlines())
    return init, user


def system_of(inv: CliInvocation) -> str:
    init, _ = stdin_lines(inv)
    assert init["type"] == "control_request" and init["request"]["subtype"] == "initialize"
    system: str = init["request"]["systemPrompt"]
    return system


def prompt_of(inv: CliInvocation) -> str:
    _, user = stdin_lines(inv)
    assert user["type"] == "user" and user["message"]["role"] == "user"
    [block] = user["message"]["content"]
    text: str = block["text"]
    return text


def test_invocation_matches_the_recommended_one() -> None:
    inv = build_invocation(
        request(Message("system", "Be terse."), Message("user", "What is 2+2?")),
        Timeouts(total_ms=90_000),
    )
    captured = json.loads((CAPTURES / "success_stream_json_partial.meta.json").read_text())
    expected = captured["argv"][1:]
    # The system prompt goes on stdin (initialize), read with the conversation.
    at = expected.index("--system-prompt")
    del expected[at : at + 2]
    at = expected.index("--model")
    expected[at:at] = ["--input-format", "stream-json"]
    assert list(inv.args) == expected
    assert system_of(inv) == "Be terse."
    assert prompt_of(inv) == "What is 2+2?"
    assert inv.waits_for_prompt
    assert inv.env == {
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "API_TIMEOUT_MS": "90000",
        "MAX_THINKING_TOKENS": "0",
    }
    assert inv.credentials == ((".claude/.credentials.json", ".claude/.credentials.json"),)
    assert inv.home_files == {}


def test_system_prompts_share_one_warm_key() -> None:
    """Only the model and the honoured options start a process differently."""
    a = build_invocation(request(Message("system", "A"), Message("user", "x")), Timeouts())
    b = build_invocation(request(Message("user", "y")), Timeouts())
    other_model = build_invocation(
        ChatRequest(model="claude-opus-4-1", messages=(Message("user", "y"),)), Timeouts()
    )
    assert a.warm_key() == b.warm_key()
    assert a.warm_key() != other_model.warm_key()


def test_invocation_options_passed_through_env() -> None:
    inv = build_invocation(
        request(Message("user", "hi"), max_tokens=300, extra={"reasoning_effort": "high"}),
        Timeouts(),
    )
    assert inv.env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "300"
    assert inv.env["MAX_THINKING_TOKENS"] == "31999"
    assert system_of(inv) == DEFAULT_SYSTEM_PROMPT
    assert "hi" not in inv.args


def test_json_schema_goes_to_the_clis_own_option_with_one_retry_turn() -> None:
    schema = {"name": "answer", "schema": {"type": "object", "required": ["n"]}}
    inv = build_invocation(
        request(Message("user", "2+2?"), response_format=ResponseFormat("json_schema", schema)),
        Timeouts(),
    )
    args = list(inv.args)
    assert args[args.index("--json-schema") + 1] == '{"type":"object","required":["n"]}'
    assert args[args.index("--max-turns") + 1] == "2"
    assert system_of(inv) == DEFAULT_SYSTEM_PROMPT  # no instruction


def test_json_object_is_any_object() -> None:
    inv = build_invocation(
        request(Message("user", "2+2?"), response_format=ResponseFormat("json_object")),
        Timeouts(),
    )
    assert inv.args[inv.args.index("--json-schema") + 1] == '{"type":"object"}'


def structured(lines: list[dict[str, Any]], schema: dict[str, Any]) -> list[Event]:
    tr = ClaudeTranslator("claude", lambda: NOW, schema=schema)
    events: list[Event] = []
    for doc in lines:
        events.extend(tr.feed(json.dumps(doc).encode()))
    return [*events, *tr.end(None, "")]


N_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
PROSE = {"type": "stream_event", "event": {"type": "content_block_delta", "delta": {
    "type": "text_delta", "text": "Let me answer."}}}  # fmt: skip


def test_the_structured_output_is_the_answer_and_prose_is_not() -> None:
    result = {"type": "result", "subtype": "success", "is_error": False,
              "stop_reason": "tool_use", "structured_output": {"n": 4}}  # fmt: skip
    events = structured([PROSE, result], N_SCHEMA)
    assert events[0] == TextDelta('{"n":4}')
    assert events[-1] == Finish("stop")
    assert text_of(events) == '{"n":4}'


def test_structured_output_off_the_schema_is_an_error_naming_the_problem() -> None:
    result = {"type": "result", "subtype": "success", "is_error": False,
              "structured_output": {"n": "four"}}  # fmt: skip
    with pytest.raises(ProviderError) as caught:
        structured([result], N_SCHEMA)
    assert caught.value.failure is Failure.UPSTREAM_ERROR
    assert "/n: 'four' is not of type 'integer'" in caught.value.message


def test_out_of_turns_after_a_schema_complaint_says_what_was_wrong() -> None:
    complaint = {"type": "user", "message": {"role": "user", "content": [{
        "type": "tool_result", "is_error": True, "tool_use_id": "t",
        "content": "Output does not match required schema: /n: must be integer"}]}}  # fmt: skip
    result = {"type": "result", "subtype": "error_max_turns", "is_error": True}
    with pytest.raises(ProviderError) as caught:
        structured([complaint, result], N_SCHEMA)
    assert caught.value.message == (
        "claude: the answer does not match the response_format schema (after one retry: "
        "Output does not match required schema: /n: must be integer)"
    )


def test_huge_system_prompt_is_never_in_argv() -> None:
    big = "rule. " * 40_000
    inv = build_invocation(request(Message("system", big), Message("user", "hi")), Timeouts())
    assert big not in " ".join(inv.args)
    assert system_of(inv) == big
    assert prompt_of(inv) == "hi"


def test_plugin_declares_what_it_drops() -> None:
    assert plugin.type == "claude-cli"
    assert "temperature" in DROPS
    assert "tools (client-side function calling)" not in DROPS  # bridged over MCP
    provider = plugin.factory(ProviderConfig("claude", "claude-cli"))
    assert provider.capabilities.tools is True
    assert provider.capabilities.tool_choices == {"auto", "none"}
    assert provider.capabilities.streaming == "token"
    assert provider.capabilities.drops == DROPS
    assert provider.quota() is None


def test_tools_without_a_bridge_are_not_sent() -> None:
    inv = build_invocation(
        request(Message("user", "weather?"), tools=(Tool("get_weather"),), tool_choice="none"),
        Timeouts(),
    )
    assert b"get_weather" not in inv.stdin
    assert not any("get_weather" in a for a in inv.args)
    assert inv.home_files == {}


def test_bridged_tools_are_the_only_mcp_server_and_the_only_allowed_tools() -> None:
    tools = (Tool("get_weather"), Tool("get_time"))
    run = BridgedRun(tools)
    inv = build_invocation(request(Message("user", "weather?"), tools=tools), Timeouts(), run)
    args = list(inv.args)
    assert args[args.index("--tools") + 1] == ""  # every built-in tool stays off
    assert "--strict-mcp-config" in args
    # One turn to answer, one more after arguments off the schema; a model that keeps
    # calling a missing tool ends there.
    assert args[args.index("--max-turns") + 1] == "2"
    assert args[args.index("--mcp-config") + 1] == "../home/.olp-mcp.json"
    # Every tool of the bridge, whichever the request's are: a CLI started ahead can
    # take any request's tools.
    assert args[args.index("--allowedTools") + 1 :] == ["mcp__olp"]
    assert inv.tools_run is run
    url = "http://127.0.0.1:1/s/mcp"
    assert inv.mcp_files is not None
    config = json.loads(inv.mcp_files(url)[".olp-mcp.json"])
    assert config == {"mcpServers": {"olp": {"type": "http", "url": url}}}
    assert inv.home_files == {}  # the secret URL is neither in argv nor in the warm key
    assert b"127.0.0.1" not in b"".join(a.encode() for a in args)


def test_requests_with_other_tools_can_take_the_same_claude_started_ahead() -> None:
    weather = build_invocation(
        request(Message("user", "weather?"), tools=(Tool("get_weather"),)),
        Timeouts(),
        BridgedRun((Tool("get_weather"),)),
    )
    clock = build_invocation(
        request(Message("user", "time?"), tools=(Tool("get_time"),)),
        Timeouts(),
        BridgedRun((Tool("get_time"),)),
    )
    plain = build_invocation(request(Message("user", "time?")), Timeouts())
    assert weather.waits_for_prompt and clock.waits_for_prompt
    assert weather.warm_key() == clock.warm_key()
    assert weather.warm_key() != plain.warm_key()


def tool_replay(**kw: Any) -> tuple[list[Event], ClaudeTranslator, int]:
    """The real CLI's output for two bridged tool calls (captured with the real 2.1.197)."""
    tr = ClaudeTranslator("claude", lambda: NOW, tools=True, **kw)
    lines = (CAPTURES / "tool_use_parallel_bridged.jsonl").read_bytes().splitlines()
    events: list[Event] = []
    read = 0
    for line in lines:
        read += 1
        events.extend(tr.feed(line))
        if tr.done:
            break
    return [*events, *tr.end(None, "")], tr, read


def test_bridged_tool_calls_are_the_answer_under_the_clients_names() -> None:
    events, _, read = tool_replay()
    lines = (CAPTURES / "tool_use_parallel_bridged.jsonl").read_bytes().splitlines()
    assert read == len(lines)  # done at message_stop: the CLI is not left to call them
    assert events == [
        ToolCallDelta(0, "toolu_fake_0", "get_weather", '{"city":"Paris"}'),
        ToolCallDelta(1, "toolu_fake_1", "get_time", '{"tz":"CET"}'),
        Usage(prompt_tokens=12, completion_tokens=7),
        Finish("tool_calls"),
    ]


def test_parallel_tool_calls_false_answers_the_first_call_only() -> None:
    events, _, _ = tool_replay(parallel_tool_calls=False)
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert calls == [ToolCallDelta(0, "toolu_fake_0", "get_weather", '{"city":"Paris"}')]
    assert events[-1] == Finish("tool_calls")


def test_without_a_bridge_tool_use_blocks_are_not_client_tool_calls() -> None:
    tr = ClaudeTranslator("claude", lambda: NOW)
    for line in (CAPTURES / "tool_use_parallel_bridged.jsonl").read_bytes().splitlines():
        assert not [e for e in tr.feed(line) if isinstance(e, ToolCallDelta)]
    assert not tr.done


def test_a_turn_with_arguments_off_the_schema_is_not_the_answer() -> None:
    retried: list[int] = []
    schemas = {
        "get_weather": {"type": "object", "properties": {"city": {"type": "integer"}}},
        "get_time": None,
    }
    tr = ClaudeTranslator(
        "claude", lambda: NOW, tools=True, tool_schemas=schemas, on_retry=retried.append
    )
    events: list[Event] = []
    for line in (CAPTURES / "tool_use_parallel_bridged.jsonl").read_bytes().splitlines():
        events.extend(tr.feed(line))
    assert not tr.done  # reading on: the model was told, its next turn may answer
    assert not [e for e in events if isinstance(e, ToolCallDelta)]
    assert retried == [2]  # both calls of the turn are let go by the bridge
    out_of_turns = {"type": "result", "subtype": "error_max_turns", "is_error": True}
    tr.feed(json.dumps(out_of_turns).encode())
    with pytest.raises(ProviderError) as caught:
        tr.end(None, "")
    assert caught.value.message == (
        "claude: the model's tool call is invalid (after one retry: "
        "get_weather: /city: 'Paris' is not of type 'integer')"
    )
