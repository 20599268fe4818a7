"""A bridged run's prompt, held until Claude Code has the request's client tools.

Claude Code takes an MCP server's tools a few milliseconds after it has listed them, and
answers a prompt read before then without them. That happens to a CLI started ahead (the
warm pool): it connected to OLP's bridge when nothing was asked of it yet, and it lists the
request's tools only once the request is bound to its endpoint. So a bridged run's stdin
opens with the `initialize` control request and an `mcp_status` control request, and the
prompt is held back; each status answer:

- shows the bridge `pending` (a CLI started for this request, still connecting): the
  prompt goes now, and the CLI waits for the connection and its tools before it asks the
  model;
- shows it `connected` with every tool of the request: the prompt goes;
- shows it `connected` without them yet: the status is asked again, for up to
  `WAIT_S` seconds;
- anything else (`failed`, no such server): the run ends with `SPAWN_FAILED`, and the
  request falls back; a CLI that does not know `mcp_status` gets the prompt.

The CLI's `system/init` line then says which tools the model is given: one with none of
the bridge's (Claude Code gave up waiting for the connection) ends the run the same way,
before the model has answered: a CLI that lost the bridge does not answer without it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import orjson

from olp.errors import Failure, ProviderError

__all__ = ["STATUS_REQUEST", "WAIT_S", "ToolsGate"]

_STATUS_ID = "olp-mcp-status"
STATUS_REQUEST = (
    orjson.dumps(
        {"type": "control_request", "request_id": _STATUS_ID, "request": {"subtype": "mcp_status"}}
    )
    + b"\n"
)
WAIT_S = 5.0


class ToolsGate:
    """See the module docstring. `feed()` each decoded stdout line; `reply()` gives what
    to write to the CLI's stdin next, once."""

    def __init__(
        self,
        provider: str,
        server: str,
        tools: Collection[str],
        prompt: bytes,
        *,
        prefix: str,
        now: Callable[[], float],
    ) -> None:
        """`server`: the bridge's name in the CLI's MCP config; `tools`: the request's
        tool names; `prefix`: what Claude Code puts before them; `prompt`: the held line."""
        self._provider = provider
        self._server = server
        self._tools = frozenset(tools)
        self._prefix = prefix
        self._prompt = prompt
        self._now = now
        self._deadline: float | None = None
        self._reply: bytes | None = None
        self.open = False

    def reply(self) -> bytes | None:
        reply, self._reply = self._reply, None
        return reply

    def feed(self, doc: Mapping[str, Any]) -> None:
        kind = doc.get("type")
        if kind == "control_response" and not self.open:
            self._status(doc.get("response"))
        elif kind == "system" and doc.get("subtype") == "init":
            self._check_init(doc)

    def _status(self, response: object) -> None:
        if not isinstance(response, dict) or response.get("request_id") != _STATUS_ID:
            return
        if response.get("subtype") == "error":
            # A CLI that does not know the request: the prompt goes, and the `init` line
            # says whether the model has the tools.
            self.open = True
            self._reply = self._prompt
            return
        body = response.get("response")
        servers = body.get("mcpServers") if isinstance(body, dict) else None
        bridge = _named(servers, self._server)
        status = bridge.get("status") if bridge else None
        listed = {tool.get("name") for tool in _dicts(bridge.get("tools") if bridge else None)}
        if status == "pending" or (status == "connected" and self._tools <= listed):
            self.open = True
            self._reply = self._prompt
            return
        if status != "connected":
            raise self._failed(f"its MCP status for the bridge is {status or 'missing'}")
        now = self._now()
        if self._deadline is None:
            self._deadline = now + WAIT_S
        elif now > self._deadline:
            missing = ", ".join(sorted(self._tools - listed))
            raise self._failed(f"after {WAIT_S:g}s it still lacks {missing}")
        self._reply = STATUS_REQUEST

    def _check_init(self, doc: Mapping[str, Any]) -> None:
        # None of the bridge's tools at all is what a CLI that did not wait for them
        # shows (a name the CLI may have shortened is not counted against it).
        tools = doc.get("tools")
        given = [t for t in tools or () if isinstance(t, str) and t.startswith(self._prefix)]
        if self._tools and not given:
            raise self._failed("its model was given none of them")

    def _failed(self, why: str) -> ProviderError:
        return ProviderError(
            Failure.SPAWN_FAILED,
            f"claude did not take the request's tools from OLP's MCP bridge: {why} (it "
            "must reach 127.0.0.1: check NO_PROXY in the provider's env; a claude that "
            "does not take changed tools can run without processes started ahead: "
            f"providers.{self._provider}.warm 0)",
            provider=self._provider,
        )


def _dicts(value: object) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _named(servers: object, name: str) -> dict[str, Any] | None:
    return next((s for s in _dicts(servers) if s.get("name") == name), None)
