"""A bridged claude run's prompt waits until the CLI has the request's tools.

The status lines are the real claude 2.1.197's answers to `mcp_status` (captured against
a loopback MCP server): a CLI started for the request (its bridge still connecting), one
started ahead that has not yet taken the tools it was told of, and one that has.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from olp.errors import Failure, ProviderError
from olp.providers.claude_cli.tools_gate import STATUS_REQUEST, WAIT_S, ToolsGate

PROMPT = b'{"type":"user"}\n'
URL = "http://127.0.0.1:33187/s/mcp"


def status(state: str | None, tools: list[str] | None = None) -> dict[str, Any]:
    server: dict[str, Any] = {"name": "olp", "status": state, "scope": "dynamic"}
    server["config"] = {"type": "http", "url": URL}
    if tools is not None:
        server["serverInfo"] = {"name": "olp", "version": "1"}
        server["tools"] = [{"name": name, "annotations": {}} for name in tools]
    servers = [server] if state is not None else []
    response = {"subtype": "success", "request_id": "olp-mcp-status"}
    return {
        "type": "control_response",
        "response": {**response, "response": {"mcpServers": servers}},
    }


def init(tools: list[str]) -> dict[str, Any]:
    return {"type": "system", "subtype": "init", "tools": tools, "mcp_servers": []}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gate(clock: Clock | None = None) -> ToolsGate:
    return ToolsGate(
        "claude",
        "olp",
        ["get_weather", "get_time"],
        PROMPT,
        prefix="mcp__olp__",
        now=clock or Clock(),
    )


def test_the_status_request_is_a_control_request_line() -> None:
    assert orjson.loads(STATUS_REQUEST) == {
        "type": "control_request",
        "request_id": "olp-mcp-status",
        "request": {"subtype": "mcp_status"},
    }
    assert STATUS_REQUEST.endswith(b"\n")


def test_a_bridge_still_connecting_gets_the_prompt_the_cli_waits_for_it() -> None:
    held = gate()
    assert held.reply() is None
    held.feed({"type": "control_response", "response": {"request_id": "olp-init"}})
    assert held.reply() is None  # the initialize answer is not the status
    held.feed(status("pending"))
    assert held.reply() == PROMPT
    assert held.reply() is None  # once


def test_a_cli_started_ahead_is_asked_again_until_it_has_the_tools() -> None:
    held = gate()
    held.feed(status("connected", []))  # told of the tools, not taken yet
    assert held.reply() == STATUS_REQUEST
    held.feed(status("connected", ["get_weather"]))
    assert held.reply() == STATUS_REQUEST
    held.feed(status("connected", ["get_time", "get_weather"]))
    assert held.reply() == PROMPT
    held.feed(status("connected", []))  # (a late answer changes nothing)
    assert held.reply() is None


def test_a_cli_that_never_takes_the_tools_fails_the_run() -> None:
    clock = Clock()
    held = gate(clock)
    held.feed(status("connected", []))
    clock.now += WAIT_S + 0.1
    with pytest.raises(ProviderError) as caught:
        held.feed(status("connected", ["get_weather"]))
    assert caught.value.failure is Failure.SPAWN_FAILED
    assert "still lacks get_time" in caught.value.message


@pytest.mark.parametrize("state", ["failed", "needs-auth", None])
def test_a_bridge_that_did_not_connect_fails_the_run(state: str | None) -> None:
    with pytest.raises(ProviderError) as caught:
        gate().feed(status(state))
    assert caught.value.failure is Failure.SPAWN_FAILED
    assert "OLP's MCP bridge" in caught.value.message


def test_a_cli_without_mcp_status_gets_the_prompt() -> None:
    held = gate()
    error = {"subtype": "error", "request_id": "olp-mcp-status", "error": "Unsupported"}
    held.feed({"type": "control_response", "response": error})
    assert held.reply() == PROMPT


def test_a_model_given_none_of_the_tools_fails_the_run_before_it_answers() -> None:
    gate().feed(init(["mcp__olp__get_weather", "mcp__olp__get_time"]))  # all there: fine
    gate().feed(init(["mcp__olp__get_weather"]))  # (a name may have been shortened)
    with pytest.raises(ProviderError) as caught:
        gate().feed(init(["Task"]))
    assert caught.value.failure is Failure.SPAWN_FAILED
    assert "its model was given none of them" in caught.value.message
