"""codex-cli translation, pure: IR → argv/config.toml/JSON-RPC, and every captured
`codex app-server` transcript → IR events, taxonomy code, reset time, quota snapshot.

Captures (tests/fixtures/cli/codex): `app_server_*` from the research driver (codex 0.171) and
`app_server_olp_*` made with capture_app_server.py (the provider's own handshake against
ResponsesGeminiUpstream); `err_*`/`success_json` are `codex exec --json` transcripts,
used for the error texts Codex prints.
"""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from olp.errors import Failure, ProviderError
from olp.ir import ChatRequest, Event, Finish, Message, ReasoningDelta, TextDelta, Usage
from olp.providers.codex_cli import failures, translate
from olp.providers.codex_cli.events import AppServerTurn, quota_from_rate_limits

FIXTURES = Path(__file__).parent.parent / "fixtures" / "cli" / "codex"
ANSWER = "Hello from the fake upstream. 2+2=4."


def lines(name: str) -> list[bytes]:
    return (FIXTURES / f"{name}.jsonl").read_bytes().splitlines()


def replay(
    name: str, prompt: str = "What is 2+2?"
) -> tuple[AppServerTurn, list[Event], list[bytes]]:
    """Feed a whole capture; the turn, its events and what it wrote back."""
    turn = AppServerTurn("codex", "gpt-5.5", prompt)
    events: list[Event] = []
    sent: list[bytes] = [turn.opening()]
    for line in lines(name):
        new, reply = turn.feed(line)
        events += new
        if reply:
            sent.append(reply)
        if turn.done:
            break
    return turn, events, sent


def failure_of(name: str) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        replay(name)
    return info.value


def text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def rpc(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in data.splitlines()]


# -- what codex is given ----------------------------------------------------------------


def test_argv_is_app_server_with_every_optional_feature_off_and_no_prompt() -> None:
    args = translate.argv()
    assert args[0] == "app-server"
    disabled = {args[i + 1] for i, a in enumerate(args) if a == "--disable"}
    assert disabled == set(translate.FEATURES_OFF)
    assert {"plugins", "apps", "shell_tool", "multi_agent", "hooks"} <= disabled


def test_config_for_an_openai_compatible_upstream_turns_codex_retries_off() -> None:
    upstream = translate.upstream_from_env({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1/"})
    assert upstream == translate.Upstream("http://127.0.0.1:9/v1", "OPENAI_API_KEY")
    doc = tomllib.loads(
        translate.config_toml("gpt-5.5", upstream=upstream, has_system=True, idle_timeout_ms=7000)
    )
    assert doc["model"] == "gpt-5.5"
    assert doc["model_provider"] == "olp"
    assert doc["approval_policy"] == "never" and doc["sandbox_mode"] == "read-only"
    assert doc["model_instructions_file"] == "system.md"
    assert doc["analytics"] == {"enabled": False}
    assert doc["otel"]["exporter"] == "none"
    assert doc["web_search"] == "disabled"
    provider = doc["model_providers"]["olp"]
    assert provider["base_url"] == "http://127.0.0.1:9/v1"
    assert provider["env_key"] == "OPENAI_API_KEY"
    assert provider["wire_api"] == "responses"
    assert provider["request_max_retries"] == 0 and provider["stream_max_retries"] == 0
    assert provider["stream_idle_timeout_ms"] == 7000


def test_an_api_key_alone_means_the_openai_api_with_retries_off() -> None:
    upstream = translate.upstream_from_env({"OPENAI_API_KEY": "sk-x"})
    assert upstream is not None and upstream.base_url == "https://api.openai.com/v1"


def test_the_chatgpt_login_uses_codex_builtin_provider() -> None:
    assert translate.upstream_from_env({"OTHER": "x"}) is None
    doc = tomllib.loads(
        translate.config_toml("gpt-5.5", upstream=None, has_system=False, idle_timeout_ms=1)
    )
    assert "model_provider" not in doc and "model_providers" not in doc
    assert "model_instructions_file" not in doc


@pytest.mark.parametrize("model", ['x"\nmodel_provider = "evil', "modèle\x7f\x01", "a\\b"])
def test_a_client_chosen_model_name_cannot_inject_toml(model: str) -> None:
    doc = tomllib.loads(
        translate.config_toml(model, upstream=None, has_system=False, idle_timeout_ms=1)
    )
    assert doc["model"] == model
    assert "model_provider" not in doc


def test_reasoning_effort_passes_through_only_when_valid() -> None:
    assert translate.reasoning_effort({"reasoning_effort": "high"}) == "high"
    assert translate.reasoning_effort({"reasoning_effort": "bogus"}) is None
    cfg = translate.config_toml(
        "m", upstream=None, has_system=False, idle_timeout_ms=1, reasoning_effort="low"
    )
    assert tomllib.loads(cfg)["model_reasoning_effort"] == "low"


def test_system_prompt_goes_to_a_private_file_never_argv() -> None:
    files = translate.home_files("model = 'x'\n", "Be terse.")
    assert files == {".codex/config.toml": b"model = 'x'\n", ".codex/system.md": b"Be terse."}
    assert translate.home_files("c", None) == {".codex/config.toml": b"c"}


# -- the handshake ----------------------------------------------------------------------


def test_handshake_sends_each_request_when_the_previous_answer_arrived() -> None:
    turn, _, sent = replay("app_server_olp_success", prompt="Tell me a joke")
    opening, after_init, after_thread = (rpc(s) for s in sent)
    assert opening == [
        {
            "method": "initialize",
            "id": 1,
            "params": {"clientInfo": opening[0]["params"]["clientInfo"]},
        }
    ]
    assert [m["method"] for m in after_init] == ["initialized", "thread/start"]
    params = after_init[1]["params"]
    assert params == {
        "model": "gpt-5.5",
        "approvalPolicy": "never",
        "sandbox": "read-only",
        "ephemeral": True,
    }
    [start] = after_thread
    assert start["method"] == "turn/start"
    assert start["params"]["threadId"] == turn.thread_id
    assert start["params"]["input"] == [{"type": "text", "text": "Tell me a joke"}]


def test_error_answer_to_a_request_is_spawn_failed() -> None:
    turn = AppServerTurn("codex", "m", "p")
    with pytest.raises(ProviderError) as info:
        turn.feed(b'{"id": 2, "error": {"code": -32600, "message": "unknown model"}}')
    assert info.value.failure is Failure.SPAWN_FAILED
    assert "unknown model" in info.value.message


# -- streamed success -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["app_server_success", "app_server_olp_success"])
def test_success_streams_deltas_then_usage_then_stop(name: str) -> None:
    turn, events, _ = replay(name)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 3  # token streaming, not one message
    assert text(events) == ANSWER
    assert isinstance(events[-2], Usage) and events[-2].prompt_tokens == 30
    assert events[-1] == Finish("stop")
    assert turn.done


def test_success_usage_counts_the_whole_thread() -> None:
    _, events, _ = replay("app_server_success")
    assert Usage(prompt_tokens=30, completion_tokens=12) in events


def test_rate_limit_notification_becomes_the_quota_snapshot() -> None:
    turn, _, _ = replay("app_server_success")
    quota = turn.quota
    assert quota is not None
    assert quota.utilisation == pytest.approx(0.88)
    assert quota.reset_at == 1795971232
    assert quota.five_hour_utilisation == pytest.approx(0.88)
    assert quota.five_hour_reset_at == 1795971232  # the primary window is the 5-hour one
    assert quota.extra["secondary_used_percent"] == 41
    assert quota.extra["secondary_window_minutes"] == 10080


def test_empty_rate_limits_keep_no_snapshot() -> None:
    empty = {"limitId": "codex", "primary": None, "secondary": None}
    assert quota_from_rate_limits(empty) is None


def test_reasoning_deltas_and_a_second_message_item() -> None:
    turn = AppServerTurn("codex", "m", "p")

    def note(method: str, **params: Any) -> list[Event]:
        return turn.feed(orjson.dumps({"method": method, "params": params}))[0]

    assert note("item/reasoning/summaryTextDelta", delta="thinking") == [ReasoningDelta("thinking")]
    assert note("item/agentMessage/delta", itemId="a", delta="one") == [TextDelta("one")]
    assert note("item/agentMessage/delta", itemId="a", delta=" more") == [TextDelta(" more")]
    assert note("item/agentMessage/delta", itemId="b", delta="two") == [
        TextDelta("\n\n"),
        TextDelta("two"),
    ]


def test_noise_is_ignored() -> None:
    turn = AppServerTurn("codex", "m", "p")
    for line in (
        b"",
        b"WARNING: not json",
        b"[1, 2]",
        b'{"method": "configWarning", "params": {}}',
    ):
        assert turn.feed(line) == ([], b"")
    assert not turn.done


# -- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "failure", "status"),
    [
        ("app_server_err_429_no_retries", Failure.RATE_LIMITED, 429),
        ("app_server_olp_err_429", Failure.RATE_LIMITED, 429),
        ("app_server_err_500_no_retries", Failure.UPSTREAM_ERROR, None),
        ("app_server_olp_err_500", Failure.UPSTREAM_ERROR, None),
        ("app_server_olp_err_503", Failure.OVERLOADED, 503),
        ("app_server_olp_err_529", Failure.OVERLOADED, 529),
        ("app_server_olp_err_401", Failure.AUTH_FAILED, 401),
        ("app_server_err_usage_limit_reached", Failure.QUOTA_EXHAUSTED, None),
        ("app_server_olp_err_usage_limit", Failure.QUOTA_EXHAUSTED, None),
    ],
)
def test_each_captured_error_lands_on_its_taxonomy_code(
    name: str, failure: Failure, status: int | None
) -> None:
    error = failure_of(name)
    assert error.failure is failure
    assert error.upstream_status == status
    assert error.provider == "codex"


def test_auth_failure_is_a_502_that_stops_the_chain() -> None:
    error = failure_of("app_server_olp_err_401")
    assert error.code == "provider_auth_failed" and error.http_status == 502
    assert "401 Unauthorized" in error.message


@pytest.mark.parametrize(
    "name", ["app_server_err_usage_limit_reached", "app_server_olp_err_usage_limit"]
)
def test_usage_limit_carries_the_reset_time_codex_printed(name: str) -> None:
    error = failure_of(name)
    message = error.message
    assert "try again at" in message
    clock = message.rsplit("try again at ", 1)[1].rstrip(".")  # e.g. "4:54 PM"
    assert error.reset_at is not None
    reset = datetime.fromtimestamp(error.reset_at, UTC)
    assert reset.strftime("%-I:%M %p") == clock
    assert 0 < error.reset_at - datetime.now(UTC).timestamp() <= 86400


def test_connection_refused_fails_at_once_instead_of_waiting_for_the_network() -> None:
    error = failure_of("app_server_olp_err_conn_refused")
    assert error.failure is Failure.TRANSPORT
    assert "Connection failed" in error.message


def test_a_hang_gives_nothing_so_olps_own_timeout_decides() -> None:
    turn, events, _ = replay("app_server_olp_err_hang")
    assert events == [] and not turn.done


def test_death_mid_stream_after_content_is_salvaged_as_length() -> None:
    turn, events, _ = replay("app_server_olp_err_die_midstream")
    assert text(events)
    assert events[-1] == Finish("length")
    assert turn.done


def test_process_gone_before_the_turn_completed() -> None:
    turn = AppServerTurn("codex", "m", "p")
    with pytest.raises(ProviderError) as info:
        turn.ended(1, "panic: something\n")
    assert info.value.failure is Failure.SPAWN_FAILED
    assert "panic: something" in info.value.message
    salvaged = AppServerTurn("codex", "m", "p")
    salvaged.feed(
        b'{"method": "item/agentMessage/delta", "params": {"itemId": "i", "delta": "hi"}}'
    )
    assert salvaged.ended(1, "") == [Finish("length")]


def test_retry_progress_that_is_not_a_connection_failure_is_ignored() -> None:
    turn = AppServerTurn("codex", "m", "p")
    note = {
        "method": "error",
        "params": {"error": {"message": "Reconnecting... 1/5 (high demand)"}, "willRetry": True},
    }
    assert turn.feed(orjson.dumps(note)) == ([], b"")
    assert not turn.done


# -- the texts codex prints (exec transcripts) ------------------------------------------


def exec_error(name: str) -> str:
    for line in lines(name):
        event = orjson.loads(line)
        if event.get("type") == "turn.failed":
            return str(event["error"]["message"])
    raise AssertionError(f"{name} has no turn.failed")


@pytest.mark.parametrize(
    ("name", "failure", "status"),
    [
        ("err_429_no_retries", Failure.RATE_LIMITED, 429),
        ("err_503_no_retries", Failure.OVERLOADED, 503),
        ("err_529_no_retries", Failure.OVERLOADED, 529),
        ("err_401_no_retries", Failure.AUTH_FAILED, 401),
        ("err_500_no_retries", Failure.UPSTREAM_ERROR, None),
        ("err_usage_limit_reached_429", Failure.QUOTA_EXHAUSTED, None),
        ("err_hang_midstream_idle_timeout_5s_no_retries", Failure.TIMEOUT, None),
    ],
)
def test_codex_error_texts_classify_without_structured_info(
    name: str, failure: Failure, status: int | None
) -> None:
    error = failures.classify("codex", exec_error(name))
    assert (error.failure, error.upstream_status) == (failure, status)


def test_usage_limit_texts_with_a_duration_or_a_date() -> None:
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()
    in_days = (
        "You've hit your usage limit. Upgrade to Pro or try again in 5 days 22 hours 11 minutes."
    )
    on_date = "You've hit your usage limit. Upgrade to Plus, or try again at Dec 5th, 2026 8:19 PM."
    assert failures.classify("c", in_days, now=now).reset_at == now + 5 * 86400 + 22 * 3600 + 660
    dated = failures.classify("c", on_date, now=now)
    assert dated.failure is Failure.QUOTA_EXHAUSTED
    assert dated.reset_at == datetime(2026, 12, 5, 20, 19, tzinfo=UTC).timestamp()


def test_exec_connection_refusal_text_is_recognised() -> None:
    [first, *_] = [orjson.loads(x) for x in lines("err_conn_refused_no_retries") if b'"error"' in x]
    assert failures.is_connection_retry(first["message"], None)
    assert not failures.is_connection_retry(
        "Reconnecting... 2/5 (We're experiencing high demand)", None
    )


def test_prompt_is_the_shared_serialisation() -> None:
    from olp.providers._prompt import serialise

    request = ChatRequest(
        model="gpt-5.5",
        messages=(
            Message("system", "Be terse."),
            Message("user", "hi"),
            Message("assistant", "yo"),
            Message("user", "again"),
        ),
    )
    cli = serialise(request)
    turn = AppServerTurn("codex", request.model, cli.prompt)
    _, _, sent = replay("app_server_olp_success", prompt=cli.prompt)
    start = rpc(sent[-1])[0]
    assert start["params"]["input"][0]["text"] == cli.prompt
    assert "<assistant>\nyo\n</assistant>" in cli.prompt
    assert cli.system == "Be terse."
    assert turn.thread_id is None


def test_images_follow_the_prompt_text_in_the_turn() -> None:
    from olp.ir import ImagePart, TextPart
    from olp.providers._prompt import serialise

    url = "data:image/png;base64,iVBORw0KGgo="
    request = ChatRequest(
        model="gpt-5.5",
        messages=(Message("user", (TextPart("What is this?"), ImagePart(url))),),
    )
    cli = serialise(request, keep_images=True)
    turn = AppServerTurn("codex", "gpt-5.5", cli.prompt, tuple(i.url for i in cli.images))
    turn.feed(b'{"id": 1, "result": {}}')
    [start] = rpc(turn.feed(b'{"id": 2, "result": {"thread": {"id": "t1"}}}')[1])
    assert start["params"]["input"] == [
        {"type": "text", "text": "What is this?\n[image 1]"},
        {"type": "image", "url": url},
    ]


def test_a_request_from_the_server_is_declined_not_left_waiting() -> None:
    turn = AppServerTurn("codex", "m", "p")
    ask = {"id": 7, "method": "item/commandExecution/requestApproval", "params": {"command": "ls"}}
    events, reply = turn.feed(orjson.dumps(ask))
    assert events == []
    [answer] = rpc(reply)
    assert answer["id"] == 7 and answer["error"]["code"] == -32601


# -- the runner's conversation mode (keep_stdin_open + send), which app-server needs ----


def test_runner_keeps_stdin_open_for_a_conversation(tmp_path: Path) -> None:
    import asyncio
    import sys

    from olp.config.model import ProviderConfig
    from olp.providers._subprocess import CliInvocation, CliRunner

    echo = tmp_path / "echo"
    echo.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "for line in sys.stdin:\n"
        "    print('got ' + line.strip(), flush=True)\n"
        "    if line.strip() == 'bye': break\n"
    )
    echo.chmod(0o755)
    runner = CliRunner("echo", ProviderConfig(name="echo", type="x"), default_command=str(echo))

    async def talk() -> tuple[list[bytes], bool]:
        invocation = CliInvocation(args=(), stdin=b"hello\n", keep_stdin_open=True)
        async with runner.spawn(invocation) as proc:
            lines = proc.lines()
            got = [await anext(lines)]
            assert await proc.send(b"again\n")
            got.append(await anext(lines))
            assert await proc.send(b"bye\n")
            got += [line async for line in lines]
            await proc.wait()
            return got, await proc.send(b"too late\n")

    got, late = asyncio.run(talk())
    assert got == [b"got hello", b"got again", b"got bye"]
    assert late is False  # the child is gone: not an error, just nobody listening
