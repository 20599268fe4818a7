"""The model's calls of the client's tools, read off `codex app-server`'s raw events. Pure.

A bridged run (`translate` module docstring) starts its thread with raw events:
`rawResponseItem/completed` carries each Responses item as the model sent it — a call of a
client tool is a `function_call` in the namespace `mcp__olp`, with the client's own tool
name — and `rawResponse/completed` ends each model response. Codex's own `mcpToolCall`
items are no use here: it starts a turn's MCP calls one at a time, and the bridge holds
the first, so the others are never reported.

When a response ends with calls, they are the answer: one `ToolCallDelta` each (the
model's call id, the client's tool name, the model's arguments as they are), and the
provider ends the run. A response with a call that is of no tool of the request (one of
Codex's own that remain, or a made-up name), or whose arguments do not match its tool's
`parameters`, is not the answer: the bridge answered that call with the problem,
`on_retry` lets the turn's other calls go, and the model gets one more response. Still
off after that, the hop fails (`UPSTREAM_ERROR`, naming the call and the problem); so a
model that keeps calling a tool cannot loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from olp.ir import ToolCallDelta
from olp.providers._json_schema import arguments_error, invalid_tool_call
from olp.providers.codex_cli.translate import TOOL_NAMESPACE

__all__ = ["ToolCallReader"]

_CALL_TYPES = frozenset({"function_call", "custom_tool_call"})


@dataclass(frozen=True, slots=True)
class _Call:
    call_id: str
    name: str
    arguments: str
    bridged: bool  # a function of the bridge's namespace: the bridge sees the call


class ToolCallReader:
    """One bridged run's tool calls; see the module docstring."""

    def __init__(
        self,
        provider: str,
        schemas: Mapping[str, Mapping[str, Any] | None],
        *,
        parallel: bool = True,
        on_retry: Callable[[int], None] | None = None,
    ) -> None:
        """`schemas`: each client tool's parameters; `parallel=False`: answer only the
        first call of a response (Codex cannot forbid the model several);
        `on_retry(calls)`: a response of `calls` bridged calls is not the answer, and the
        next response is the model's last (`BridgedRun.retry_turn(calls, last=True)`)."""
        self.provider = provider
        self._schemas = schemas
        self._parallel = parallel
        self._on_retry = on_retry
        self._calls: list[_Call] = []
        self._retried = False

    def item(self, item: Any) -> bool:
        """A `rawResponseItem/completed` item; whether it was a call."""
        if not isinstance(item, dict) or item.get("type") not in _CALL_TYPES:
            return False
        arguments = item.get("arguments", item.get("input"))
        self._calls.append(
            _Call(
                call_id=str(item.get("call_id") or item.get("id") or ""),
                name=str(item.get("name") or ""),
                arguments=arguments if isinstance(arguments, str) else "",
                bridged=item.get("type") == "function_call"
                and item.get("namespace") == TOOL_NAMESPACE,
            )
        )
        return True

    def response_completed(self) -> list[ToolCallDelta]:
        """The model's response ended: its calls as the answer, or none (no calls: Codex
        goes on to its final message; calls off the request's tools: the retry).

        Raises `ProviderError` (UPSTREAM_ERROR) for a second response off the tools."""
        calls, self._calls = self._calls, []
        if not calls:
            return []
        problem = self._problem(calls)
        if problem is None:
            answered = calls if self._parallel else calls[:1]
            return [
                ToolCallDelta(index, call.call_id, call.name, call.arguments)
                for index, call in enumerate(answered)
            ]
        if self._retried:
            raise invalid_tool_call("codex", self.provider, problem)
        self._retried = True
        if self._on_retry is not None:  # the bridge saw (or will see) its own calls
            self._on_retry(sum(self._reaches_bridge(call) for call in calls))
        return []

    def _problem(self, calls: list[_Call]) -> str | None:
        for call in calls:
            if not call.bridged or call.name not in self._schemas:
                return f"{call.name}: not one of the request's tools"
            problem = arguments_error(_json(call.arguments), self._schemas[call.name])
            if problem is not None:
                return f"{call.name}: {problem}"
        return None

    def _reaches_bridge(self, call: _Call) -> bool:
        return call.bridged and call.name in self._schemas


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
