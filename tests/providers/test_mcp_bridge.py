"""The MCP tool bridge over real loopback HTTP, spoken to by the official `mcp` client.

What a CLI sees: exactly the request's tools; a call is held (never run) until its run
ends or its turn is retried; arguments off the tool's schema are refused at once; the
endpoint answers only under its secret and only until it is closed. A client connected
before the request (a CLI started ahead) lists no tools, then is told that they changed,
and `bind()` returns once it has listed the request's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import httpx
import mcp.types as mcp_types
from mcp import Client

from olp.ir import Tool
from olp.providers._mcp_bridge import BridgedRun, Endpoint, ToolBridge

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


@contextlib.asynccontextmanager
async def serving(
    bridge: ToolBridge, tools: Sequence[Tool]
) -> AsyncIterator[tuple[BridgedRun, str]]:
    """A run of `tools` bound to a new endpoint, as the CLI runner does for a cold start,
    and the endpoint's URL."""
    endpoint = await bridge.open()
    run = BridgedRun(tools)
    assert await endpoint.bind(run)  # nothing connected yet: at once
    try:
        yield run, endpoint.url
    finally:
        run.end()
        endpoint.close()


def text_of(result: object) -> str:
    return "".join(getattr(part, "text", "") for part in getattr(result, "content", []))


def test_lists_exactly_the_requests_tools() -> None:
    with_bridge(_lists_exactly_the_requests_tools)


async def _lists_exactly_the_requests_tools(bridge: ToolBridge) -> None:
    async with serving(bridge, [WEATHER, CLOCK]) as (_, url), Client(url) as client:
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
    async with serving(bridge, [WEATHER]) as (run, url), Client(url) as client:
        call = asyncio.create_task(client.call_tool("get_weather", {"city": "Paris"}))
        await asyncio.sleep(0.5)
        assert not call.done()  # held: the CLI cannot go on to another turn
        assert run.calls == ["get_weather"]
        run.end()  # what the end of the request does
        result = await asyncio.wait_for(call, 5)
    assert result.is_error
    assert "OLP does not run tools" in text_of(result)


def test_arguments_off_the_schema_are_refused_at_once() -> None:
    with_bridge(_arguments_off_the_schema_are_refused_at_once)


async def _arguments_off_the_schema_are_refused_at_once(bridge: ToolBridge) -> None:
    async with serving(bridge, [WEATHER]) as (_, url), Client(url) as client:
        result = await asyncio.wait_for(client.call_tool("get_weather", {"city": 75}), 5)
    assert result.is_error
    assert text_of(result).startswith(
        "Invalid arguments for get_weather: /city: 75 is not of type 'string'"
    )


def test_a_retried_turn_lets_its_held_and_late_calls_go() -> None:
    with_bridge(_a_retried_turn_lets_its_held_and_late_calls_go)


async def _a_retried_turn_lets_its_held_and_late_calls_go(bridge: ToolBridge) -> None:
    async with serving(bridge, [WEATHER, CLOCK]) as (run, url), Client(url) as client:
        held = asyncio.create_task(client.call_tool("get_weather", {"city": "Paris"}))
        await asyncio.sleep(0.5)
        assert run.calls == ["get_weather"]
        run.retry_turn(2)  # the turn had two calls; one has not arrived yet
        first = await asyncio.wait_for(held, 5)
        late = await asyncio.wait_for(client.call_tool("get_time", {}), 5)
        next_turn = asyncio.create_task(client.call_tool("get_time", {}))
        await asyncio.sleep(0.3)
        assert not next_turn.done()  # the next turn's calls are held again
        run.end()
        await asyncio.wait_for(next_turn, 5)
    assert "another call of this turn had invalid arguments" in text_of(first)
    assert "another call of this turn had invalid arguments" in text_of(late)


def test_after_the_last_retry_an_invalid_call_is_held_too() -> None:
    with_bridge(_after_the_last_retry_an_invalid_call_is_held_too)


async def _after_the_last_retry_an_invalid_call_is_held_too(bridge: ToolBridge) -> None:
    async with serving(bridge, [WEATHER]) as (run, url), Client(url) as client:
        first = await asyncio.wait_for(client.call_tool("get_weather", {"city": 75}), 5)
        run.retry_turn(1, last=True)
        again = asyncio.create_task(client.call_tool("get_weather", {"city": 75}))
        await asyncio.sleep(0.3)
        # Answered, it would send the CLI on to a request the provider does not want.
        assert not again.done()
        run.end()
        result = await asyncio.wait_for(again, 5)
    assert "Invalid arguments for get_weather" in text_of(first)
    assert "OLP does not run tools" in text_of(result)


def test_only_the_endpoints_secret_path_answers_and_only_until_it_closes() -> None:
    with_bridge(_only_the_endpoints_secret_path_answers_and_only_until_it_closes)


async def _only_the_endpoints_secret_path_answers_and_only_until_it_closes(
    bridge: ToolBridge,
) -> None:
    async with serving(bridge, [WEATHER]) as (_, url):
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


def test_a_client_connected_ahead_lists_the_requests_tools_once_bound() -> None:
    with_bridge(_a_client_connected_ahead_lists_the_requests_tools_once_bound)


async def _a_client_connected_ahead_lists_the_requests_tools_once_bound(
    bridge: ToolBridge,
) -> None:
    endpoint = await bridge.open()
    listings: list[list[str]] = []
    relisted = asyncio.Event()

    async def relist(client: Client) -> None:
        listings.append([tool.name for tool in (await client.list_tools()).tools])
        if len(listings) == 2:
            relisted.set()

    try:
        async with relisting_client(endpoint, relist) as client:
            # Told that the list can change: only then is a client bound to listen.
            tools = client.server_capabilities.tools
            assert tools is not None and tools.list_changed is True
            await relist(client)  # what a CLI started ahead does once connected
            assert listings == [[]]
            run = BridgedRun([WEATHER, CLOCK])
            # bind() returns once the new list is sent (the client reads it in a moment).
            assert await endpoint.bind(run, timeout_s=5)
            await asyncio.wait_for(relisted.wait(), 5)
            assert listings == [[], ["get_weather", "get_time"]]
            result = await asyncio.wait_for(client.call_tool("get_weather", {"city": 1}), 5)
            assert text_of(result).startswith("Invalid arguments for get_weather")
            run.end()
    finally:
        endpoint.close()


def test_a_client_that_does_not_list_again_is_not_bound_in_time() -> None:
    with_bridge(_a_client_that_does_not_list_again_is_not_bound_in_time)


async def _a_client_that_does_not_list_again_is_not_bound_in_time(bridge: ToolBridge) -> None:
    endpoint = await bridge.open()
    try:
        async with Client(endpoint.url, mode="legacy") as client:
            assert (await client.list_tools()).tools == []
            # Told that the tools changed, it does not list them: it would go on without.
            assert not await endpoint.bind(BridgedRun([WEATHER]), timeout_s=0.5)
    finally:
        endpoint.close()


def test_a_call_before_any_request_is_not_run() -> None:
    with_bridge(_a_call_before_any_request_is_not_run)


async def _a_call_before_any_request_is_not_run(bridge: ToolBridge) -> None:
    endpoint = await bridge.open()
    try:
        async with Client(endpoint.url, mode="legacy") as client:
            result = await asyncio.wait_for(client.call_tool("get_weather", {}), 5)
    finally:
        endpoint.close()
    assert result.is_error
    assert "no request is being answered" in text_of(result)


@contextlib.asynccontextmanager
async def relisting_client(
    endpoint: Endpoint, relist: Callable[[Client], Awaitable[None]]
) -> AsyncIterator[Client]:
    """A client of `endpoint` that lists the tools again when told they changed (as Claude
    Code does); over the initialize handshake, as the CLIs speak it."""
    holder: list[Client] = []
    tasks: set[asyncio.Task[None]] = set()

    async def on_message(message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            # Not in the handler itself: the answer comes through the same session.
            task = asyncio.create_task(relist(holder[0]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async with Client(endpoint.url, mode="legacy", message_handler=on_message) as client:
        holder.append(client)
        yield client
