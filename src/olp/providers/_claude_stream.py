"""Claude Code's `--output-format stream-json` events → IR events (pure).

Shared by `claude-cli` and `qwen-cli`: Qwen Code speaks the same format
(tests/fixtures/cli/README.md §1, §5). Token streaming comes from `stream_event` deltas (with
`--include-partial-messages`); the `assistant` event repeats the finished message, so
its text is only emitted where no delta carried it (no partial messages, or the CLI's
silent non-streaming retry after a stalled stream). Synthetic error messages
(`model: "<synthetic>"` or a top-level `error`) are never content: they are kept for
classification. `result` is the terminal event.

With client tools bridged over MCP (`olp.providers._mcp_bridge`), the model's calls of
them (`tool_use` blocks named `<tool_prefix><name>`) are collected from the finished
blocks, and the message that made them is the answer: at its `message_stop` they come out
as `ToolCallDelta`s under the client's own names, and that is terminal too (the CLI
would go on to call the tools, which only the client may run). `ToolTurns` checks each
turn's calls against the request's tools before they are the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from olp.ir import Event, Finish, ReasoningDelta, TextDelta, ToolCall, ToolCallDelta, Usage
from olp.providers._anthropic_messages import finish_reason, usage_from
from olp.providers._json_schema import arguments_error

__all__ = ["ClaudeStreamParser", "RateLimitInfo", "ToolTurns", "finish_reason", "usage_from"]


@dataclass(frozen=True, slots=True)
class RateLimitInfo:
    """A `rate_limit_event` (Claude subscriptions): the CLI's view of the unified limit."""

    status: str  # allowed | allowed_warning | rejected
    resets_at: float | None = None
    kind: str | None = None  # five_hour | seven_day | ...
    utilisation: float | None = None

    @classmethod
    def parse(cls, raw: object) -> RateLimitInfo | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("status"), str):
            return None
        resets = raw.get("resetsAt")
        util = raw.get("utilization")
        kind = raw.get("rateLimitType")
        return cls(
            status=raw["status"],
            resets_at=float(resets) if isinstance(resets, int | float) and resets > 0 else None,
            kind=kind if isinstance(kind, str) else None,
            utilisation=float(util) if isinstance(util, int | float) else None,
        )


def _is_answer(kind: object, doc: dict[str, Any]) -> bool:
    if kind == "stream_event":
        event = doc.get("event")
        return not (isinstance(event, dict) and event.get("type") == "ping")
    return kind in ("assistant", "result")


class ClaudeStreamParser:
    """Feed decoded stdout lines in order; read the outcome off the attributes."""

    def __init__(
        self, tool_prefix: str | None = None, tool_names: Mapping[str, str] | None = None
    ) -> None:
        """`tool_prefix`: how the CLI names bridged client tools (None: no tools bridged);
        `tool_names`: the client's name of a tool the CLI names otherwise than
        `<tool_prefix><name>` (e.g. shortened)."""
        self.result: dict[str, Any] | None = None
        self.rate_limit: RateLimitInfo | None = None
        # The CLI's synthetic error message: its `error` kind and its text.
        self.error_kind: str | None = None
        self.error_text: str | None = None
        self.stop_reason: str | None = None
        self.content_seen = False
        # See `LineTranslator.answer_lines`: `stream_event`s (but pings), `assistant`
        # messages (synthetic errors included) and the `result`; not `system/*` lines
        # (init, status, api_retry) or the `rate_limit_event` status.
        self.answer_lines = 0
        # The bridged tools the model called, in order, and the turn's token counts.
        self.tool_calls: list[ToolCall] = []
        self.tools_called = False
        self.tool_usage: Usage | None = None
        self._tool_prefix = tool_prefix
        self._tool_names = tool_names or {}
        self._input_tokens = 0
        self._message_id = ""
        # Per message id and kind ("text"/"thinking"): what deltas carried, and what the
        # `assistant` events (one per content block) have shown so far.
        self._streamed: dict[tuple[str, str], str] = {}
        self._shown: dict[tuple[str, str], str] = {}

    def feed(self, doc: dict[str, Any]) -> list[Event]:
        kind = doc.get("type")
        if _is_answer(kind, doc):
            self.answer_lines += 1
        if kind == "stream_event":
            return self._stream_event(doc.get("event"))
        if kind == "assistant":
            return self._assistant(doc)
        if kind == "result":
            self.result = doc
        elif kind == "rate_limit_event":
            self.rate_limit = RateLimitInfo.parse(doc.get("rate_limit_info")) or self.rate_limit
        return []

    @property
    def done(self) -> bool:
        return self.result is not None or self.tools_called

    def retry_tools(self) -> None:
        """The last turn's tool calls are not the answer: read on for the next turn's."""
        self.tool_calls, self.tools_called, self.tool_usage = [], False, None

    def _stream_event(self, event: object) -> list[Event]:
        if not isinstance(event, dict):
            return []
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("id"), str):
                self._message_id = message["id"]
            if isinstance(message, dict):
                self._input_tokens = _tokens(message.get("usage"), "input_tokens")
        elif kind == "content_block_delta":
            return self._delta(event.get("delta"))
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            if self.tool_calls:
                output = _tokens(event.get("usage"), "output_tokens")
                self.tool_usage = Usage(prompt_tokens=self._input_tokens, completion_tokens=output)
        elif kind == "message_stop" and self.tool_calls and not self.tools_called:
            self.tools_called = True
            self.content_seen = True
            return [
                ToolCallDelta(index, call.id, call.name, call.arguments)
                for index, call in enumerate(self.tool_calls)
            ]
        return []

    def _delta(self, delta: object) -> list[Event]:
        if not isinstance(delta, dict):
            return []
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            return self._emit("text", delta["text"])
        if delta.get("type") == "thinking_delta" and isinstance(delta.get("thinking"), str):
            return self._emit("thinking", delta["thinking"])
        return []

    def _emit(self, kind: str, text: str) -> list[Event]:
        if not text:
            return []
        key = (self._message_id, kind)
        self._streamed[key] = self._streamed.get(key, "") + text
        self.content_seen = True
        return [TextDelta(text) if kind == "text" else ReasoningDelta(text)]

    def _assistant(self, doc: dict[str, Any]) -> list[Event]:
        message = doc.get("message")
        if not isinstance(message, dict):
            return []
        blocks = message.get("content")
        texts = [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []
        if doc.get("error") or message.get("model") == "<synthetic>":
            self.error_kind = str(doc.get("error") or "unknown")
            self.error_text = "".join(str(b.get("text", "")) for b in texts) or None
            return []
        raw_id = message.get("id")
        msg_id = raw_id if isinstance(raw_id, str) else self._message_id
        events: list[Event] = []
        for block in texts:
            kind = block.get("type")
            if kind == "tool_use":
                self._tool_use(block)
                continue
            value = block.get("text") if kind == "text" else block.get("thinking")
            if kind in ("text", "thinking") and isinstance(value, str):
                events.extend(self._catch_up(msg_id, kind, value))
        if self.tool_calls and self.tool_usage is None and isinstance(message.get("usage"), dict):
            # Qwen Code has no `message_delta`: its finished message carries the counts.
            usage = message["usage"]
            self.tool_usage = Usage(
                prompt_tokens=_tokens(usage, "input_tokens"),
                completion_tokens=_tokens(usage, "output_tokens"),
            )
        return events

    def _tool_use(self, block: dict[str, Any]) -> None:
        prefix, name, call_id = self._tool_prefix, block.get("name"), block.get("id")
        if prefix is None or not isinstance(name, str) or not name.startswith(prefix):
            return  # not a client tool: the CLI refuses it itself
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{len(self.tool_calls)}"
        arguments = orjson.dumps(block.get("input") or {}).decode()
        client_name = self._tool_names.get(name, name[len(prefix) :])
        self.tool_calls.append(ToolCall(call_id, client_name, arguments))

    def _catch_up(self, msg_id: str, kind: str, value: str) -> list[Event]:
        """Emit what this finished block has that no delta carried."""
        key = (msg_id, kind)
        shown = self._shown.get(key, "") + value
        self._shown[key] = shown
        streamed = self._streamed.get(key, "")
        if len(shown) <= len(streamed) or not shown.startswith(streamed):
            return []
        return self._emit_for(key, shown[len(streamed) :])

    def _emit_for(self, key: tuple[str, str], text: str) -> list[Event]:
        self._streamed[key] = self._streamed.get(key, "") + text
        self.content_seen = True
        return [TextDelta(text) if key[1] == "text" else ReasoningDelta(text)]


def _tokens(usage: object, key: str) -> int:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and value >= 0 else 0


class ToolTurns:
    """The model's calls of bridged tools, turn by turn, before they are the answer.

    A call of a tool the request does not have, or with arguments off its tool's
    parameters, was answered with the problem (by the CLI or the bridge), so the model may
    call again: that turn is not the answer. Its calls are dropped, `on_retry(calls)` lets
    the bridge release the turn's held calls, and the parser reads on for the next turn.
    """

    def __init__(
        self,
        parser: ClaudeStreamParser,
        schemas: Mapping[str, Mapping[str, Any] | None],
        on_retry: Callable[[int], None] | None = None,
        *,
        parallel: bool = True,
        cli_checks_arguments: bool = False,
    ) -> None:
        """`schemas`: each bridged tool's parameters (empty: calls are not checked);
        `parallel=False`: only a turn's first call is answered (a CLI cannot forbid
        several); `cli_checks_arguments`: the CLI refuses a call off its schema itself
        (qwen), so only the others reach the bridge, and `on_retry` counts only those."""
        self._parser = parser
        self._schemas = schemas
        self._on_retry = on_retry
        self._parallel = parallel
        self._cli_checks_arguments = cli_checks_arguments
        # The last turn's problem, for the error when the CLI runs out of turns.
        self.complaint: str | None = None

    def screen(self, events: list[Event]) -> list[Event]:
        """`events` without the tool calls that are not (or not all of) the answer."""
        if self._parser.tools_called and self._schemas and self._off_schema():
            events = [e for e in events if not isinstance(e, ToolCallDelta)]
        if not self._parallel:
            events = [e for e in events if not isinstance(e, ToolCallDelta) or e.index == 0]
        return events

    def finish(self) -> list[Event]:
        """The end of an answer that is tool calls: the turn's usage (if told), `tool_calls`."""
        usage = self._parser.tool_usage
        return [usage, Finish("tool_calls")] if usage is not None else [Finish("tool_calls")]

    def _off_schema(self) -> bool:
        checked = [(call, self._problem(call)) for call in self._parser.tool_calls]
        for call, problem in checked:
            if problem is not None:
                self.complaint = f"{call.name}: {problem}"
                self._parser.retry_tools()
                if self._on_retry is not None:
                    self._on_retry(sum(self._reaches_bridge(c, p) for c, p in checked))
                return True
        return False

    def _problem(self, call: ToolCall) -> str | None:
        if call.name not in self._schemas:
            return "not one of the request's tools"
        return arguments_error(_json(call.arguments), self._schemas[call.name])

    def _reaches_bridge(self, call: ToolCall, problem: str | None) -> bool:
        """A call of a bridged tool the CLI passed on (it may refuse one off its schema)."""
        if call.name not in self._schemas:
            return False
        return problem is None or not self._cli_checks_arguments


def _json(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
