"""`codex app-server` stdout → IR events, as a sans-I/O protocol. Pure: no I/O.

`AppServerTurn.feed(line)` takes one JSONL line the server wrote and returns the IR
events it means plus the JSON-RPC messages to write back (the handshake is
`initialize` → `initialized` + `thread/start` → `turn/start`, each sent when the previous
answer arrived). The provider only moves bytes.

Notifications used (captured from codex 0.171, see tests/fixtures/cli/codex/):
- `item/agentMessage/delta{delta}` → TextDelta (real token streaming);
  `item/reasoning/{summaryTextDelta,textDelta}` → ReasoningDelta;
- `thread/tokenUsage/updated{tokenUsage.total}` → Usage; `turn/completed` → Finish, or the
  turn's error when its status is `failed`;
- `error{error{message, codexErrorInfo, additionalDetails}, willRetry}`: fatal when
  `willRetry` is false. A `willRetry` notice that the connection failed ("Reconnecting...
  waiting for network") fails at once as TRANSPORT: Codex would wait for the network
  forever, retry knobs or not;
- `account/rateLimits/updated{rateLimits}` → the provider's quota snapshot;
- with a `schema` (the turn's `outputSchema`): the final agent message is held back and
  checked against it, then given whole (`_json_schema.schema_error`);
- with client tools bridged (`tools`): `rawResponseItem/completed` and
  `rawResponse/completed{usage}` → the model's tool calls (`tool_calls.ToolCallReader`),
  then the turn ends with Finish("tool_calls") without waiting for `turn/completed`.
Salvage (docs/design.md §5 rule 4): an error after content ends the answer with
Finish("length") instead of failing the hop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from olp.errors import Failure, ProviderError
from olp.ir import Event, Finish, ReasoningDelta, TextDelta, Usage
from olp.providers._json_schema import schema_error
from olp.providers._lenient import count
from olp.providers.base import QuotaSnapshot
from olp.providers.codex_cli import failures, translate
from olp.providers.codex_cli.tool_calls import ToolCallReader
from olp.providers.codex_cli.translate import RpcId

__all__ = ["AppServerTurn", "quota_from_rate_limits", "usage_from"]

_REASONING = ("item/reasoning/summaryTextDelta", "item/reasoning/textDelta")
_FIVE_HOURS_MIN = 300


class AppServerTurn:
    """One request's conversation with one `codex app-server` process."""

    def __init__(
        self,
        provider: str,
        model: str,
        prompt: str,
        images: tuple[str, ...] = (),
        tools: ToolCallReader | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> None:
        """`tools`: the run bridges client tools, whose calls it reads (raw events);
        `schema`: the answer's JSON Schema (`translate.output_schema`)."""
        self.provider = provider
        self._model = model
        self._prompt = prompt
        self._images = images
        self.thread_id: str | None = None
        self.done = False
        # See `LineTranslator.answer_lines`: the turn's items (not the echoed prompt),
        # usage, completion and final errors; not the handshake, status notices or
        # Codex's own retry notices.
        self.answer_lines = 0
        self.quota: QuotaSnapshot | None = None
        self._usage: Usage | None = None
        self._content = False
        self._item: str | None = None  # the agent message being streamed
        self._tools = tools
        self._schema = schema
        self._held = ""  # with a schema: the latest agent message, not yet given
        # Of a bridged run: the summed usage of its model responses so far.
        self._raw_usage: dict[str, int] = {}

    def opening(self) -> bytes:
        """What to write to stdin at spawn time."""
        return translate.initialize(raw_events=self._tools is not None)

    def feed(self, line: bytes) -> tuple[list[Event], bytes]:
        """Events for one stdout line, and the bytes to write back (may be empty)."""
        if self.done or not line.strip():
            return [], b""
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            return [], b""  # stray non-JSON output (a warning): not protocol
        if not isinstance(msg, dict):
            return [], b""
        if "id" in msg and "method" not in msg:
            return [], self._response(msg)
        if "id" in msg:
            # A request from the server (an approval, a question for the user): nobody is
            # there to answer, so decline at once rather than let the turn wait forever.
            return [], translate.decline(msg["id"])
        return self._notification(str(msg.get("method") or ""), msg.get("params") or {}), b""

    def ended(self, status: int | None, stderr: str) -> list[Event]:
        """The process closed its output before the turn completed."""
        if self.done:
            return []
        tail = _last_line(stderr)
        error = ProviderError(
            Failure.SPAWN_FAILED,
            f"codex app-server ended before the turn completed (exit {status})"
            + (f": {tail}" if tail else ""),
            provider=self.provider,
        )
        return self._fail(error)

    # -- responses to our requests -------------------------------------------------------

    def _response(self, msg: dict[str, Any]) -> bytes:
        error = msg.get("error")
        if error is not None:
            message = error.get("message", "") if isinstance(error, dict) else str(error)
            raise ProviderError(
                Failure.SPAWN_FAILED,
                f"codex app-server refused request {msg.get('id')}: {message}",
                provider=self.provider,
            )
        result = msg.get("result") or {}
        if msg.get("id") == RpcId.INITIALIZE:
            raw_events = self._tools is not None
            return translate.initialized() + translate.thread_start(
                self._model, raw_events=raw_events
            )
        if msg.get("id") == RpcId.THREAD_START:
            thread = result.get("thread") if isinstance(result, dict) else None
            thread_id = thread.get("id") if isinstance(thread, dict) else None
            if not isinstance(thread_id, str):
                raise ProviderError(
                    Failure.SPAWN_FAILED,
                    "codex app-server started a thread without an id",
                    provider=self.provider,
                )
            self.thread_id = thread_id
            return translate.turn_start(thread_id, self._prompt, self._images, self._schema)
        return b""

    # -- notifications -------------------------------------------------------------------

    def _notification(self, method: str, params: Any) -> list[Event]:
        if not isinstance(params, dict):
            return []
        if _is_answer(method, params):
            self.answer_lines += 1
        if method == "item/agentMessage/delta":
            return self._text(params)
        if self._tools is not None and method.startswith("rawResponse"):
            return self._raw(method, params)
        if method in _REASONING:
            delta = params.get("delta")
            return [ReasoningDelta(delta)] if isinstance(delta, str) and delta else []
        if method == "thread/tokenUsage/updated":
            self._usage = usage_from(params.get("tokenUsage")) or self._usage
        elif method == "account/rateLimits/updated":
            self.quota = quota_from_rate_limits(params.get("rateLimits")) or self.quota
        elif method == "error":
            return self._error(params)
        elif method == "turn/completed":
            return self._completed(params.get("turn") or {})
        return []

    def _text(self, params: dict[str, Any]) -> list[Event]:
        delta = params.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        item = params.get("itemId")
        if self._schema is not None:
            self._held = delta if item != self._item else self._held + delta
            self._item = item if isinstance(item, str) else None
            return []
        events: list[Event] = []
        # A second agent message in one turn (after a tool step) starts a new paragraph.
        if self._content and item != self._item:
            events.append(TextDelta("\n\n"))
        self._item = item if isinstance(item, str) else None
        self._content = True
        events.append(TextDelta(delta))
        return events

    def _raw(self, method: str, params: dict[str, Any]) -> list[Event]:
        """A bridged run's raw events: the model's calls, and the end of each response."""
        assert self._tools is not None
        if method == "rawResponseItem/completed":
            if self._tools.item(params.get("item")):
                self.answer_lines += 1
            return []
        if method != "rawResponse/completed":
            return []
        self.answer_lines += 1
        usage = params.get("usage")
        if isinstance(usage, dict):
            for key, value in usage.items():
                self._raw_usage[key] = self._raw_usage.get(key, 0) + count(value)
        try:
            calls = self._tools.response_completed()
        except ProviderError as exc:
            return self._fail(exc)
        if not calls:
            return []
        self.done = True
        usage_total = usage_from({"total": self._raw_usage})
        return [*calls, *([usage_total] if usage_total else []), Finish("tool_calls")]

    def _error(self, params: dict[str, Any]) -> list[Event]:
        error = params.get("error") or {}
        if not isinstance(error, dict):
            error = {"message": str(error)}
        message = str(error.get("message") or "")
        details = error.get("additionalDetails")
        if params.get("willRetry"):
            if not failures.is_connection_retry(
                message, details if isinstance(details, str) else None
            ):
                return []  # Codex's own reconnect progress; a final error follows
            failure = ProviderError(
                Failure.TRANSPORT,
                f"codex: cannot reach the upstream ({details or message})",
                provider=self.provider,
            )
            return self._fail(failure)
        return self._fail(failures.classify(self.provider, message, error.get("codexErrorInfo")))

    def _completed(self, turn: dict[str, Any]) -> list[Event]:
        status = turn.get("status")
        if status == "completed":
            self.done = True
            if self._schema is not None:
                return [self._structured(self._schema), *self._usage_events(), Finish("stop")]
            return [*self._usage_events(), Finish("stop")]
        error = turn.get("error") or {}
        if not isinstance(error, dict):
            error = {}
        message = str(error.get("message") or f"codex turn {status}")
        return self._fail(failures.classify(self.provider, message, error.get("codexErrorInfo")))

    def _structured(self, schema: Mapping[str, Any]) -> TextDelta:
        """The held answer, checked against `schema` (Codex does not check it)."""
        try:
            answer = orjson.loads(self._held)
        except orjson.JSONDecodeError:
            problem: str | None = "the answer is not JSON"
        else:
            problem = schema_error(answer, schema)
        if problem is not None:
            raise ProviderError(
                Failure.UPSTREAM_ERROR,
                f"codex: the answer does not match the response_format schema ({problem})",
                provider=self.provider,
            )
        return TextDelta(self._held)

    def _fail(self, error: ProviderError) -> list[Event]:
        self.done = True
        if self._content:
            return [*self._usage_events(), Finish("length")]
        raise error

    def _usage_events(self) -> list[Event]:
        return [self._usage] if self._usage is not None else []


def _is_answer(method: str, params: dict[str, Any]) -> bool:
    if method.startswith("item/"):
        item = params.get("item")
        return not (isinstance(item, dict) and item.get("type") == "userMessage")
    if method == "error":
        return not params.get("willRetry")
    return method in ("thread/tokenUsage/updated", "turn/completed")


def usage_from(token_usage: Any) -> Usage | None:
    """`tokenUsage.total` (the whole ephemeral thread = this request) → Usage."""
    if not isinstance(token_usage, dict):
        return None
    total = token_usage.get("total") or token_usage.get("last")
    if not isinstance(total, dict):
        return None
    return Usage(
        prompt_tokens=count(total.get("inputTokens")),
        completion_tokens=count(total.get("outputTokens")),
        cached_prompt_tokens=count(total.get("cachedInputTokens")),
        cache_write_tokens=count(total.get("cacheWriteInputTokens")),
        reasoning_tokens=count(total.get("reasoningOutputTokens")),
    )


def quota_from_rate_limits(limits: Any) -> QuotaSnapshot | None:
    """`rateLimits{primary (5 h), secondary (weekly)}` → snapshot; None when empty."""
    if not isinstance(limits, dict):
        return None
    primary = limits.get("primary")
    secondary = limits.get("secondary")
    if not isinstance(primary, dict) and not isinstance(secondary, dict):
        return None
    main = primary if isinstance(primary, dict) else secondary
    assert isinstance(main, dict)
    extra: dict[str, float] = {}
    for name, window in (("primary", primary), ("secondary", secondary)):
        if isinstance(window, dict):
            for key, field in (
                ("used_percent", "usedPercent"),
                ("window_minutes", "windowDurationMins"),
                ("reset_at", "resetsAt"),
            ):
                value = window.get(field)
                if isinstance(value, int | float):
                    extra[f"{name}_{key}"] = float(value)
    used = main.get("usedPercent")
    reset = main.get("resetsAt")
    utilisation = float(used) / 100 if isinstance(used, int | float) else None
    # ChatGPT plans' primary window is the rolling 5 hours (300 minutes).
    is_five_hour = main.get("windowDurationMins") == _FIVE_HOURS_MIN
    reset_at = float(reset) if isinstance(reset, int | float) else None
    return QuotaSnapshot(
        utilisation=utilisation,
        reset_at=reset_at,
        five_hour_utilisation=utilisation if is_five_hour else None,
        five_hour_reset_at=reset_at if is_five_hour else None,
        source="codex app-server account/rateLimits/updated",
        extra=extra,
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
