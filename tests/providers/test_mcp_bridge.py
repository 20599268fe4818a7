"""The MCP tool bridge over real loopback HTTP, spoken to by the official `mcp` client.

What a CLI sees: exactly the request's tools; a call is held (never run) until its run
ends or its turn is retried; arguments off the tool's schema are refused at once; the
endpoint answers only under its run's secret and only while the run lasts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
from mcp import Client

from olp.ir import Tool
from olp.providers._mcp_bridge import ToolBridge

WEATHER = Tool(
    "get_weather",
    "The weather in a city now.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CLOCK = Tool("get_time")


def with_bridge(test: Callable[[ToolBridge], Awaitable[None]]) -> None:
    """Run `test` on a fresh bridge in an event loop of its own; close the bridge after."""

    async def main() -> None:
        bridge = ToolBridge("claude")
        try:
            await test(bridge)
        finally:
            await bridge.aclose()

    asyncio.run(main())


def text_of(result: object) -> str:
    return "".join(getattr(part, "text", "") for part in getattr(result, "content", []))


def test_lists_exactly_the_requests_tools() -> None:
    with_bridge(_lists_exactly_the_requests_tools)


async def _lists_exactly_the_requests_tools(bridge: ToolBridge) -> None:
    async with bridge.serve([WEATHER, CLOCK]) as run, Client(run.url) as client:
        listed = (await client.list_tools()).tools
    assert [(t.name, t.description) for t in listed] == [
        ("get_weather", "The weather in a city now."),
        ("get_time", None),
    ]
    assert listed[0].input_schema == dict(WEATHER.parameters or {})
    assert listed[1].input_schema == {"type": "object", "properties": {}}


def test_a_call_is_held_until_the_run_ends_and_never_run() -> None:
    with_bridge(_a_call_is_held_until_the_run_ends_and_never_run)


async def _a_call_is_held_until_the_run_ends_and_never_run(bridge: ToolBridge) -> None:
    async with bridge.serve([WEATHER]) as run, Client(run.url) as client:
        call = asyncio.create_task(client.call_tool("get_weather", {"city": "Paris"}))
        await asyncio.sleep(0.5)
        assert not call.done()  # held: the CLI cannot go on to another turn
        assert run.calls == ["get_weather"]
        run.ended.set()  # what leaving `serve` does
        result = await asyncio.wait_for(call, 5)
    assert result.is_error
    assert "OLP does not run tools" in text_of(result)


def test_arguments_off_the_schema_are_refused_at_once() -> None:
    with_bridge(_arguments_off_the_schema_are_refused_at_once)


async def _arguments_off_the_schema_are_refused_at_once(bridge: ToolBridge) -> None:
    async with bridge.serve([WEATHER]) as run, Client(run.url) as client:
        result = await asyncio.wait_for(client.call_tool("get_weather", {"city": 75}), 5)
    assert result.is_error
    assert text_of(result).startswith(
        "Invalid arguments for get_weather: /city: 75 is not of type 'string'"
    )


def test_a_retried_turn_lets_its_held_and_late_calls_go() -> None:
    with_bridge(_a_retried_turn_lets_its_held_and_late_calls_go)


async def _a_retried_turn_lets_its_held_and_late_calls_go(bridge: ToolBridge) -> None:
    async with bridge.serve([WEATHER, CLOCK]) as run, Client(run.url) as client:
        held = asyncio.create_task(client.call_tool("get_weather", {"city": "Paris"}))
        await asyncio.sleep(0.5)
        assert run.calls == ["get_weather"]
        run.retry_turn(2)  # the turn had two calls; one has not arrived yet
        first = await asyncio.wait_for(held, 5)
        late = await asyncio.wait_for(client.call_tool("get_time", {}), 5)
        next_turn = asyncio.create_task(client.call_tool("get_time", {}))
        await asyncio.sleep(0.3)
        assert not next_turn.done()  # the next turn's calls are held again
        run.ended.set()
        await asyncio.wait_for(next_turn, 5)
    assert "another call of this turn had invalid arguments" in text_of(first)
    assert "another call of this turn had invalid arguments" in text_of(late)


def test_after_the_last_retry_an_invalid_call_is_held_too() -> None:
    with_bridge(_after_the_last_retry_an_invalid_call_is_held_too)


async def _after_the_last_retry_an_invalid_call_is_held_too(bridge: ToolBridge) -> None:
    async with bridge.serve([WEATHER]) as run, Client(run.url) as client:
        first = await asyncio.wait_for(client.call_tool("get_weather", {"city": 75}), 5)
        run.retry_turn(1, last=True)
        again = asyncio.create_task(client.call_tool("get_weather", {"city": 75}))
        await asyncio.sleep(0.3)
        # Answered, it would send the CLI on to a request the provider does not want.
        assert not again.done()
        run.ended.set()
        result = await asyncio.wait_for(again, 5)
    assert "Invalid arguments for get_weather" in text_of(first)
    assert "OLP does not run tools" in text_of(result)


def test_only_the_runs_secret_path_answers_and_only_while_it_runs() -> None:
    with_bridge(_only_the_runs_secret_path_answers_and_only_while_it_runs)


async def _only_the_runs_secret_path_answers_and_only_while_it_runs(bridge: ToolBridge) -> None:
    async with bridge.serve([WEATHER]) as run:
        url = run.url
        base, secret, _ = url.rsplit("/", 2)
        async with httpx.AsyncClient() as http:
            other = "y" if secret.endswith("x") else "x"  # (a secret may end in "x")
            wrong = await http.post(f"{base}/{secret[:-1]}{other}/mcp", json={})
            assert wrong.status_code == 404
    async with httpx.AsyncClient() as http:
        gone = await http.post(url, json={})
    assert gone.status_code == 404
    assert url.startswith("http://127.0.0.1:")
    assert len(secret) >= 32
