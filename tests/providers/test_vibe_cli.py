"""vibe-cli translation, pure: IR → argv/config.toml/prompt, and every captured
`vibe -p --output streaming` run (stdout, stderr, exit status, export.json) → IR events
or a taxonomy code. Captures: mistral-vibe 3.0.2 (tests/fixtures/cli/vibe)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from olp.errors import Failure, ProviderError
from olp.ir import Event, Finish, TextDelta, Usage
from olp.providers.vibe_cli import translate
from olp.providers.vibe_cli.events import VibeStream, classify, usage_from_export

FIXTURES = Path(__file__).parent.parent / "fixtures" / "cli" / "vibe"
ANSWER = "Hello from the fake upstream. 2+2=4."


def capture(name: str) -> tuple[list[bytes], str, int, dict[str, Any] | None]:
    meta = orjson.loads((FIXTURES / f"{name}.meta.json").read_bytes())
    export = FIXTURES / f"{name}.export.json"
    return (
        (FIXTURES / f"{name}.jsonl").read_bytes().splitlines(),
        (FIXTURES / f"{name}.stderr.txt").read_text(),
        int(meta["exit_code"]),
        orjson.loads(export.read_bytes()) if export.is_file() else None,
    )


def run(name: str) -> list[Event]:
    lines, stderr, status, export = capture(name)
    stream = VibeStream("vibe")
    events = [e for line in lines for e in stream.feed(line)]
    return events + stream.end(status, stderr, export)


def failure_of(name: str) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        run(name)
    return info.value


# -- what vibe is given -----------------------------------------------------------------


def test_argv_reads_the_prompt_from_stdin_and_runs_one_turn() -> None:
    args = translate.argv()
    assert args[:1] == ("-p",) and args[1] == "--output"  # -p without a value: stdin
    assert args[args.index("--output") + 1] == "streaming"
    assert args[args.index("--max-turns") + 1] == "1"
    assert translate.EXPORT_FILE.startswith(args[args.index("--output-dir") + 1] + "/")


def test_config_has_no_retries_no_telemetry_and_the_requested_model() -> None:
    upstream = translate.upstream_from_env({})
    doc = tomllib.loads(
        translate.config_toml("devstral-medium-latest", upstream, request_timeout_s=30, idle_s=12)
    )
    assert doc["api_retry_max_elapsed_time"] == 0
    assert doc["api_timeout"] == 30 and doc["api_stream_idle_timeout"] == 12
    assert doc["enable_telemetry"] is False and doc["enable_update_checks"] is False
    [provider] = doc["providers"]
    assert provider == {
        "name": "olp",
        "api_base": "https://api.mistral.ai/v1",
        "api_key_env_var": "MISTRAL_API_KEY",
        "backend": "mistral",
    }
    [model] = doc["models"]
    assert model["name"] == "devstral-medium-latest" and model["provider"] == "olp"
    assert doc["active_model"] == model["alias"]


def test_an_owner_base_url_selects_the_generic_backend() -> None:
    upstream = translate.upstream_from_env({"MISTRAL_BASE_URL": "http://127.0.0.1:9/v1/"})
    assert upstream == translate.Upstream("http://127.0.0.1:9/v1", "generic")


def test_client_model_name_cannot_inject_toml() -> None:
    model = 'm"\n[[providers]]\nname = "evil'
    doc = tomllib.loads(
        translate.config_toml(model, translate.upstream_from_env({}), request_timeout_s=1, idle_s=1)
    )
    assert doc["models"][0]["name"] == model and len(doc["providers"]) == 1


def test_system_text_leads_the_prompt() -> None:
    assert translate.prompt_text("", "hi") == "hi"
    text = translate.prompt_text("Be terse.", "hi")
    assert text.index("Be terse.") < text.index("hi") and text.endswith("\n\nhi")


# -- captured runs ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["success_streaming", "success_streaming_stdin_prompt"])
def test_success_is_one_whole_message(name: str) -> None:
    events = run(name)
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta(ANSWER)]
    assert events[-1] == Finish("stop")


def test_usage_comes_from_the_export() -> None:
    events = run("success_streaming")
    assert Usage(prompt_tokens=30, completion_tokens=12) in events  # cost 0.0 → unknown
    assert events.index(Usage(prompt_tokens=30, completion_tokens=12)) == len(events) - 2


def test_usage_and_cost_when_vibe_knows_the_price() -> None:
    export = {
        "usage": {"input_tokens": 5, "output_tokens": 7, "cached_input_tokens": 2},
        "cost_usd": 0.25,
    }
    assert usage_from_export(export) == Usage(5, 7, cached_prompt_tokens=2, cost_usd=0.25)
    assert usage_from_export({"usage": {"input_tokens": 0, "output_tokens": 0}}) is None
    assert usage_from_export(None) is None


@pytest.mark.parametrize(
    ("name", "failure", "status"),
    [
        ("err_429_no_retry", Failure.RATE_LIMITED, 429),
        ("err_429_default_retry_budget", Failure.RATE_LIMITED, 429),
        ("err_500_no_retry", Failure.UPSTREAM_ERROR, 500),
        ("err_503_no_retry", Failure.OVERLOADED, 503),
        ("err_401_no_retry", Failure.AUTH_FAILED, None),
        ("err_conn_refused_no_retry", Failure.TRANSPORT, None),
        ("err_hang_api_timeout_10s", Failure.TIMEOUT, None),
    ],
)
def test_each_captured_error_lands_on_its_taxonomy_code(
    name: str, failure: Failure, status: int | None
) -> None:
    error = failure_of(name)
    assert (error.failure, error.upstream_status) == (failure, status)
    assert error.provider == "vibe"


def test_auth_failure_names_the_problem() -> None:
    error = failure_of("err_401_no_retry")
    assert error.code == "provider_auth_failed"
    assert "Invalid API key" in error.message


def test_exit_codes_without_stderr_fall_back_to_the_export_code() -> None:
    export = {"error": {"message": "boom", "code": "rate_limit"}}
    assert classify("v", 2, "", export).failure is Failure.RATE_LIMITED
    assert classify("v", 2, "", None).failure is Failure.UPSTREAM_ERROR
    assert classify("v", 1, "Error: config file is broken").failure is Failure.SPAWN_FAILED
    assert classify("v", 3, "").failure is Failure.SPAWN_FAILED
    assert classify("v", 0, "").failure is Failure.SPAWN_FAILED  # finished, said nothing
    quota = "Error: Client error '429 Too Many Requests' for url 'x': insufficient_quota"
    assert classify("v", 2, quota).failure is Failure.QUOTA_EXHAUSTED


def test_an_answer_then_a_limit_exit_is_salvaged() -> None:
    lines, _, _, _ = capture("success_streaming")
    stream = VibeStream("vibe")
    events = [e for line in lines for e in stream.feed(line)]
    assert stream.end(3, "", {"stop_reason": "turn_limit"}) == [Finish("length")]
    assert events == [TextDelta(ANSWER)]


def test_second_assistant_entry_is_a_new_paragraph_and_noise_is_ignored() -> None:
    stream = VibeStream("vibe")
    entry = {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "a"}]}
    assert stream.feed(b"not json") == []
    assert stream.feed(b'{"type": "tool_call"}') == []
    assert stream.feed(orjson.dumps(entry)) == [TextDelta("a")]
    assert stream.feed(orjson.dumps(entry)) == [TextDelta("\n\n"), TextDelta("a")]
