"""codex-cli with client tools, pure: what a bridged run gives Codex (config, model
catalogue, raw-event handshake) and how the captured app-server transcripts of a bridged
run (`app_server_olp_tool_calls*`, made by capture_app_server.py with the real codex 0.171
and OLP's MCP bridge) become tool-call events, the one retry and the bound."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from olp.errors import Failure, ProviderError
from olp.ir import (
    ChatRequest,
    Event,
    Finish,
    Message,
    ResponseFormat,
    TextDelta,
    Tool,
    ToolCallDelta,
    Usage,
)
from olp.providers._prompt import bridges_tools
from olp.providers.codex_cli import translate
from olp.providers.codex_cli.events import AppServerTurn
from olp.providers.codex_cli.tool_calls import ToolCallReader

FIXTURES = Path(__file__).parent.parent / "fixtures" / "cli" / "codex"
SCHEMAS: dict[str, Any] = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "get_time": {"type": "object", "properties": {"tz": {"type": "string"}}},
}
URL = "http://127.0.0.1:4000/secret/mcp"


def config(mcp_url: str | None) -> dict[str, Any]:
    return tomllib.loads(
        translate.config_toml(
            "gpt-5.5", upstream=None, has_system=False, idle_timeout_ms=1, mcp_url=mcp_url
        )
    )


def replay(name: str, reader: ToolCallReader) -> tuple[AppServerTurn, list[Event]]:
    turn = AppServerTurn("codex", "gpt-5.5", "What is 2+2?", tools=reader)
    events: list[Event] = []
    for line in (FIXTURES / f"{name}.jsonl").read_bytes().splitlines():
        new, _ = turn.feed(line)
        events += new
        if turn.done:
            break
    return turn, events


def raw_call(
    name: str, arguments: str, call_id: str, namespace: str | None = "mcp__olp"
) -> dict[str, Any]:
    item = {"type": "function_call", "name": name, "arguments": arguments, "call_id": call_id}
    return {**item, "namespace": namespace} if namespace else item


# -- what codex is given ----------------------------------------------------------------


def test_a_bridged_run_names_the_bridge_as_its_only_mcp_server_approved_and_required() -> None:
    doc = config(URL)
    assert doc["mcp_servers"] == {
        "olp": {"url": URL, "required": True, "default_tools_approval_mode": "approve"}
    }
    assert doc["model_catalog_json"] == "olp-models.json"


def test_a_run_without_tools_has_no_mcp_server_and_codexs_own_catalogue() -> None:
    doc = config(None)
    assert "mcp_servers" not in doc and "model_catalog_json" not in doc


def test_no_run_offers_request_user_input_view_image_or_codexs_skills() -> None:
    doc = config(None)
    assert doc["tools"] == {"experimental_request_user_input": {"enabled": False}}
    assert doc["skills"] == {"bundled": {"enabled": False}}
    assert "view_image" in translate.argv()


def test_the_placeholder_catalogue_does_not_list_the_requested_model() -> None:
    files = translate.home_files("cfg", None, tools=True)
    [model] = orjson.loads(files[translate.CATALOG_FILE])["models"]
    assert model["slug"] == "olp-placeholder"
    assert translate.CATALOG_FILE not in translate.home_files("cfg", None)


def test_raw_events_are_asked_for_only_by_a_bridged_run() -> None:
    assert orjson.loads(translate.initialize(raw_events=True))["params"]["capabilities"] == {
        "experimentalApi": True
    }
    assert "capabilities" not in orjson.loads(translate.initialize())["params"]
    assert orjson.loads(translate.thread_start("m", raw_events=True))["params"][
        "experimentalRawEvents"
    ]
    assert "experimentalRawEvents" not in orjson.loads(translate.thread_start("m"))["params"]


def test_tool_choice_none_is_not_bridged() -> None:
    tool = Tool("get_weather", "", SCHEMAS["get_weather"])
    ask = (Message("user", "hi"),)
    assert bridges_tools(ChatRequest(model="m", messages=ask, tools=(tool,)))
    assert not bridges_tools(
        ChatRequest(model="m", messages=ask, tools=(tool,), tool_choice="none")
    )
    assert not bridges_tools(ChatRequest(model="m", messages=ask))


# -- the captured bridged runs -----------------------------------------------------------


def test_parallel_calls_become_tool_calls_with_the_clients_names_then_tool_calls_finish() -> None:
    turn, events = replay("app_server_olp_tool_calls", ToolCallReader("codex", SCHEMAS))
    assert turn.done
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(c.index, c.id, c.name, orjson.loads(c.arguments)) for c in calls] == [
        (0, "call_fake_0", "get_weather", {"city": "Paris"}),
        (1, "call_fake_1", "get_time", {"tz": "CET"}),
    ]
    usage = [e for e in events if isinstance(e, Usage)]
    assert usage and usage[-1].prompt_tokens > 0
    assert events[-1] == Finish("tool_calls")


def test_parallel_tool_calls_false_answers_the_first_call_only() -> None:
    _, events = replay(
        "app_server_olp_tool_calls", ToolCallReader("codex", SCHEMAS, parallel=False)
    )
    assert [e.name for e in events if isinstance(e, ToolCallDelta)] == ["get_weather"]


def test_arguments_off_the_schema_let_the_turn_go_and_the_next_response_answers() -> None:
    retried: list[int] = []
    reader = ToolCallReader("codex", SCHEMAS, on_retry=retried.append)
    turn, events = replay("app_server_olp_tool_calls_retry", reader)
    assert retried == [1]  # one call of the bridge's, let go
    [call] = [e for e in events if isinstance(e, ToolCallDelta)]
    assert orjson.loads(call.arguments) == {"city": "Paris"}
    assert turn.done and events[-1] == Finish("tool_calls")


# -- the reader's rules --------------------------------------------------------------------


def test_a_second_response_off_the_tools_fails_naming_the_call_and_the_problem() -> None:
    reader = ToolCallReader("codex", SCHEMAS)
    reader.item(raw_call("get_weather", '{"city": 75}', "c1"))
    assert reader.response_completed() == []  # the retry
    reader.item(raw_call("get_weather", '{"city": 75}', "c2"))
    with pytest.raises(ProviderError) as caught:
        reader.response_completed()
    assert caught.value.failure == Failure.UPSTREAM_ERROR
    assert "invalid (after one retry: get_weather: /city: 75 is not of type 'string')" in (
        caught.value.message
    )


@pytest.mark.parametrize(
    "call",
    [
        raw_call("launch_rockets", "{}", "c1"),  # made up, in the bridge's namespace
        raw_call("list_mcp_resources", "{}", "c1", namespace=None),  # one of Codex's own
        {"type": "custom_tool_call", "name": "apply_patch", "input": "x", "call_id": "c1"},
    ],
)
def test_a_call_of_no_tool_of_the_request_is_not_the_answer(call: dict[str, Any]) -> None:
    retried: list[int] = []
    reader = ToolCallReader("codex", SCHEMAS, on_retry=retried.append)
    assert reader.item(call)
    assert reader.response_completed() == []
    assert retried == [0]  # the bridge saw none of it
    reader.item(call)
    with pytest.raises(ProviderError, match="not one of the request's tools"):
        reader.response_completed()


def test_a_response_without_calls_and_other_items_are_not_the_answer() -> None:
    reader = ToolCallReader("codex", SCHEMAS)
    assert not reader.item({"type": "message", "role": "assistant", "content": []})
    assert not reader.item("not an item")
    assert reader.response_completed() == []


# -- structured output ---------------------------------------------------------------------


def with_format(kind: str, spec: dict[str, Any] | None) -> ChatRequest:
    return ChatRequest(
        model="m",
        messages=(Message("user", "hi"),),
        response_format=ResponseFormat(kind, spec),  # type: ignore[arg-type]
    )


def test_only_a_strict_json_schema_becomes_the_output_schema() -> None:
    schema = SCHEMAS["get_time"]
    strict = with_format("json_schema", {"name": "t", "schema": schema, "strict": True})
    assert translate.output_schema(strict) == schema
    loose = with_format("json_schema", {"name": "t", "schema": schema})
    assert translate.output_schema(loose) is None
    assert translate.output_schema(with_format("json_object", None)) is None
    sent = orjson.loads(translate.turn_start("t1", "hi", (), schema))["params"]
    assert sent["outputSchema"] == schema
    assert "outputSchema" not in orjson.loads(translate.turn_start("t1", "hi"))["params"]


def test_an_answer_held_for_a_schema_that_is_not_json_is_an_error() -> None:
    turn = AppServerTurn("codex", "gpt-5.5", "What is 2+2?", schema=SCHEMAS["get_time"])
    *body, completed = (FIXTURES / "app_server_olp_success.jsonl").read_bytes().splitlines()
    events = [event for line in body for event in turn.feed(line)[0]]
    assert not any(isinstance(e, TextDelta) for e in events)  # held back, never given
    with pytest.raises(ProviderError, match="does not match the response_format schema"):
        turn.feed(completed)
