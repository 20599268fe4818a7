"""A chat request's client tools, offered to a CLI's model as MCP tools served by OLP.

A subscription CLI only lets its model call tools it knows, and every built-in one is off.
For a request with `tools`, OLP serves exactly those tools (names, descriptions, JSON
schemas) over MCP's streamable HTTP transport, and the CLI runs with that server as its
only one. Two objects, because a CLI may be started before its request is known (the warm
pool):

    endpoint = await bridge.open()       # one per child: its MCP config names endpoint.url
    run = BridgedRun(request.tools)      # one per request: its tools and the calls made
    await endpoint.bind(run)             # before the child is given its prompt
    ...
    run.end(); endpoint.close()

- One loopback listener per provider, started on first use; each endpoint has its own
  path under a fresh 192-bit secret, written only into its child's private (0700) home,
  and gone when it is closed: another child, or another local user, cannot reach it.
- The protocol is the official `mcp` SDK's low-level `Server` (client tools are JSON
  schemas, not Python functions, which is what the higher-level `MCPServer` registers).
  An endpoint lists the tools of the run bound to it, none before. A CLI started ahead
  connects and lists none; `bind()` then sends it `tools/list_changed` and waits until it
  has listed the run's tools again, so that it has them before it reads its prompt.
- The bridge never runs a tool. The provider reads the model's tool calls off the CLI's
  own output, answers the client with them and ends the child; a call that reaches the
  bridge meanwhile is held, unanswered, until the child has ended (or, if the endpoint
  outlives it, until the run ends), so the CLI cannot move on to another turn.
- `called` is set when a call of the model's current turn reaches the bridge: for a CLI
  that calls tools only once the model's turn is over (gemini), the turn's calls are then
  all on its output.
- A call whose arguments do not match the tool's schema is answered at once with the
  problem (parameters the CLI adds to every tool, `added`, are not checked). The
  provider, which checks the same, then does not answer the client with that turn but
  `retry_turn()`s it: the turn's other calls are let go (held ones now, late ones on
  arrival), the CLI hands the model the errors, and it may call again. A CLI that
  bounds its turns itself (claude's `--max-turns`) needs those answers to end; one that
  does not (codex) is told the retry was the `last`: from then on an invalid call is held
  too, so the CLI does not send the model yet another request before the provider ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import mcp.types as mcp_types
import uvicorn
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from olp.errors import Failure, ProviderError
from olp.ir import Tool
from olp.observability import event_logger
from olp.providers._json_schema import arguments_error, without_added

__all__ = ["BridgedRun", "Endpoint", "ToolBridge"]

log = event_logger("olp.providers.mcp_bridge")

_SERVER_NAME = "olp"
_EMPTY_SCHEMA = {"type": "object", "properties": {}}
# What a held call answers if the CLI is still listening when its run ends.
_NOT_RUN = "OLP does not run tools: the client runs them and sends the result back."
_RETRY = "Invalid arguments for {name}: {problem}. Call it again with arguments that match."
_LET_GO = "Not run: another call of this turn had invalid arguments. Make the calls again."
_NO_REQUEST = "Not run: no request is being answered yet."
_STARTUP_S = 5.0
_SDK_DISPATCHER_LOG = "mcp.shared.jsonrpc_dispatcher"
# How long `bind()` waits for a CLI started ahead to list the tools again (loopback: a
# few milliseconds; one that takes this long is not used).
_RELIST_S = 2.0


class BridgedRun:
    """One request's client tools and the calls its CLI makes of them."""

    def __init__(self, tools: Sequence[Tool], added: Collection[str] = ()) -> None:
        self.tools = [_mcp_tool(tool) for tool in tools]
        self._schemas = {tool.name: tool.parameters for tool in tools}
        self._added = added
        self.calls: list[str] = []
        self.ended = asyncio.Event()
        # Set by each call of the current turn (not by a late call of a retried one).
        self.called = asyncio.Event()
        # Set (and replaced) by `retry_turn()`: the held calls of that turn go.
        self._let_go = asyncio.Event()
        self._turn_calls = 0  # calls that reached the bridge in this turn
        self._owed = 0  # calls of a retried turn that have yet to arrive
        self._last_turn = False  # no retry after this turn: invalid calls are held too

    def retry_turn(self, calls: int, *, last: bool = False) -> None:
        """The model's turn of `calls` calls is not the answer: let all of them go.
        `last`: the model's next turn is its last (module docstring)."""
        self._last_turn = last
        self._owed = max(calls - self._turn_calls, 0)
        self._turn_calls = 0
        self._let_go.set()
        self._let_go = asyncio.Event()

    def end(self) -> None:
        """The request is over: every held call goes, answered "not run"."""
        self.ended.set()
        if self.calls:
            log.debug("mcp_calls_held", tools=self.calls)

    async def call(self, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        """The answer to a call of the model's (module docstring)."""
        self.calls.append(params.name)
        late = self._owed > 0
        if late:
            self._owed -= 1
        else:
            self._turn_calls += 1
            self.called.set()
        schema = self._schemas.get(params.name)
        arguments = without_added(params.arguments or {}, schema, self._added)
        problem = arguments_error(arguments, schema)
        if problem is not None and (late or not self._last_turn):
            return _error(_RETRY.format(name=params.name, problem=problem))
        if late:
            return _error(_LET_GO)
        waiters = {
            asyncio.ensure_future(self.ended.wait()),
            asyncio.ensure_future(self._let_go.wait()),
        }
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        return _error(_NOT_RUN if self.ended.is_set() else _LET_GO)


class _ToolsServer(Server[Any]):
    """The SDK's low-level server, telling clients that its tool list can change: a
    client is only bound to take a `tools/list_changed` notification once told."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class Endpoint:
    """One CLI child's MCP server, at `url`, serving the tools of the run bound to it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.run: BridgedRun | None = None
        self.closed = asyncio.Event()
        self.ready = asyncio.Event()
        # Set each time the CLI has been sent the bound run's tools (before any run is
        # bound: that it has connected and listed none).
        self.listed = asyncio.Event()
        self._listings = 0
        # The run whose tools the latest listing gave (None: none was bound yet).
        self._listed_run: BridgedRun | None = None
        self._session: ServerSession | None = None
        server = _ToolsServer(
            _SERVER_NAME, on_list_tools=self._list_tools, on_call_tool=self._call_tool
        )
        self.manager = StreamableHTTPSessionManager(
            app=server,
            json_response=True,
            # The endpoint lives as long as its child, however long that waits.
            session_idle_timeout=None,
            security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*"],
                allowed_origins=["http://127.0.0.1:*"],
            ),
        )

    async def bind(self, run: BridgedRun, timeout_s: float = _RELIST_S) -> bool:
        """Serve `run`'s tools from now on. A CLI that has listed the tools already (it
        was started ahead) is told that they changed and lists them again: True once it
        has, False if it did not within `timeout_s` (it would go on without them)."""
        self.run = run
        session = self._session
        if session is None:
            return True
        self.listed.clear()
        try:
            async with asyncio.timeout(timeout_s):
                # (A session whose client is gone drops it: then nothing is listed.)
                await session.send_tool_list_changed()
                await self.listed.wait()
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """The child is gone: end the MCP sessions (a held call with them) and the URL."""
        self.closed.set()

    async def host(self) -> None:
        """Keep the session manager running until `closed` (in a task of its own)."""
        async with self.manager.run():
            self.ready.set()
            await self.closed.wait()

    async def handle(self, scope: Any, receive: Any, send: Any) -> None:
        """One HTTP request of the CLI's."""
        listings = self._listings
        try:
            await self.manager.handle_request(scope, receive, send)
        except asyncio.CancelledError:
            # A held call whose child is gone: the session manager cancelled it, and the
            # CLI that made it is gone. Anything else is a real cancellation.
            if not self.closed.is_set():
                raise
        if self._listings != listings and self._listed_run is self.run:
            self.listed.set()  # the list is sent, before the CLI is given its prompt

    async def _list_tools(
        self, ctx: Any, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        self._session = ctx.session
        self._listings += 1
        self._listed_run = self.run
        tools = [] if self.run is None else self.run.tools
        return mcp_types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: Any, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        if self.run is None:
            return _error(_NO_REQUEST)
        return await self.run.call(params)


def _error(text: str) -> mcp_types.CallToolResult:
    content = mcp_types.TextContent(type="text", text=text)
    return mcp_types.CallToolResult(content=[content], is_error=True)


def _mcp_tool(tool: Tool) -> mcp_types.Tool:
    schema = dict(tool.parameters) if tool.parameters else dict(_EMPTY_SCHEMA)
    return mcp_types.Tool(name=tool.name, description=tool.description, input_schema=schema)


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: OLP's own server owns the process's signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _EndedChildsCalls(logging.Filter):
    """Drops the SDK's warning for a held call whose CLI was ended first: every run that
    answers with tool calls ends so (module docstring), nothing is wrong."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "gave up: transport write blocked" not in record.getMessage()


def _quiet_ended_childs_calls() -> None:
    sdk = logging.getLogger(_SDK_DISPATCHER_LOG)
    if not any(isinstance(f, _EndedChildsCalls) for f in sdk.filters):
        sdk.addFilter(_EndedChildsCalls())


class ToolBridge:
    """Serves each child's endpoint on one loopback listener; see the module docstring."""

    def __init__(self, provider: str) -> None:
        _quiet_ended_childs_calls()
        self._provider = provider
        self._endpoints: dict[str, Endpoint] = {}
        self._hosts: set[asyncio.Task[None]] = set()
        self._server: _QuietServer | None = None
        self._serving: asyncio.Task[None] | None = None
        self._port = 0
        self._lock = asyncio.Lock()

    async def open(self) -> Endpoint:
        """A new endpoint, at a URL of its own until it is `close()`d.

        Raises `ProviderError` (SPAWN_FAILED) if the bridge cannot start.
        """
        port = await self._listening()
        secret = secrets.token_urlsafe(24)
        endpoint = Endpoint(f"http://127.0.0.1:{port}/{secret}/mcp")
        host = asyncio.create_task(endpoint.host())
        self._hosts.add(host)
        self._endpoints[secret] = endpoint

        def forget(task: asyncio.Task[None]) -> None:
            self._hosts.discard(task)
            self._endpoints.pop(secret, None)

        host.add_done_callback(forget)
        try:
            async with asyncio.timeout(_STARTUP_S):
                await endpoint.ready.wait()
        except BaseException as exc:  # a cancelled request too: nothing is left open
            endpoint.close()
            if isinstance(exc, TimeoutError):
                raise self._failed("its MCP session manager did not start") from exc
            raise
        return endpoint

    async def aclose(self) -> None:
        for endpoint in self._endpoints.values():
            endpoint.close()
        if self._hosts:
            await asyncio.wait(set(self._hosts), timeout=_STARTUP_S)
        server, serving = self._server, self._serving
        self._server = self._serving = None
        if server is not None and serving is not None:
            server.should_exit = True
            await asyncio.wait({serving}, timeout=_STARTUP_S)

    async def _listening(self) -> int:
        async with self._lock:
            if self._serving is None or self._serving.done():
                try:
                    await self._start()
                except (OSError, TimeoutError) as exc:
                    raise self._failed(f"its loopback listener did not start ({exc!r})") from exc
            return self._port

    def _failed(self, why: str) -> ProviderError:
        return ProviderError(
            Failure.SPAWN_FAILED, f"the MCP tool bridge failed: {why}", provider=self._provider
        )

    async def _start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._dispatch,
            interface="asgi3",
            lifespan="off",
            log_config=None,
            access_log=False,
            log_level="warning",
        )
        server = _QuietServer(config)
        self._server = server
        self._serving = asyncio.create_task(server.serve(sockets=[sock]))
        async with asyncio.timeout(_STARTUP_S):
            while not server.started:
                if self._serving.done():
                    self._serving.result()  # raises what stopped it
                await asyncio.sleep(0.005)

    async def _dispatch(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        parts = str(scope["path"]).split("/")
        found = self._endpoints.get(parts[1]) if len(parts) == 3 and parts[2] == "mcp" else None
        if found is None or found.closed.is_set():
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await found.handle(scope, receive, send)
