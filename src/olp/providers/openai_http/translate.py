"""IR ↔ OpenAI Chat Completions, for any OpenAI-compatible server. Pure: no I/O.

Requests are translated faithfully: what the client said reaches the upstream under the
name it used, and `request.extra` (options OLP does not interpret) passes through.
Responses become IR events with one invariant the engine can rely on: `Finish` is the
last event, with `Usage` (when the upstream reported any) just before it — OpenAI sends
the usage chunk after the finish chunk, so the finish is held until `[DONE]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from olp.errors import Failure, ProviderError
from olp.ir import (
    ChatRequest,
    Event,
    Finish,
    FinishReason,
    ImagePart,
    Message,
    NamedToolChoice,
    ReasoningDelta,
    TextDelta,
    Tool,
    ToolCallDelta,
    Usage,
    json_default,
)
from olp.providers._http_errors import error_from_payload
from olp.providers._lenient import count, items, json_text, obj, text, usd
from olp.wire.openai_chat.parse import WIRE
from olp.wire.sse import SSEMessage

__all__ = [
    "StreamParser",
    "build_payload",
    "encode_payload",
    "events_from_response",
    "finish_reason",
    "usage_from",
]

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "function_call": "tool_calls",
}


def build_payload(request: ChatRequest) -> dict[str, Any]:
    """The Chat Completions body for `request` (whose model is already this hop's)."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [_message(m) for m in request.messages],
    }
    if request.stream:
        body["stream"] = True
        # Always: usage is what the ledger and quota counters are built from.
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
    if request.tool_choice is not None:
        body["tool_choice"] = _tool_choice(request.tool_choice)
    if request.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.response_format is not None:
        rf = request.response_format
        body["response_format"] = (
            {"type": rf.type, "json_schema": rf.json_schema}
            if rf.type == "json_schema" and rf.json_schema is not None
            else {"type": rf.type}
        )
    _put(body, "temperature", request.temperature)
    _put(body, "top_p", request.top_p)
    _put(body, request.max_tokens_field, request.max_tokens)
    if request.stop:
        body["stop"] = list(request.stop)
    _put(body, "seed", request.seed)
    _put(body, "user", request.user)
    # Interpreted fields win over a same-named extra: the wire layer parsed those itself.
    for key, value in request.extra.items():
        body.setdefault(key, value)
    passthrough = request.passthrough
    if passthrough is not None and passthrough.wire == WIRE:
        # Fields a Chat Completions client sent that OLP does not know (vLLM's `top_k`, …).
        for key, value in passthrough.fields.items():
            body.setdefault(key, value)
    return body


def encode_payload(body: Mapping[str, Any]) -> bytes:
    return orjson.dumps(body, default=json_default)


def _put(body: dict[str, Any], key: str, value: object) -> None:
    if value is not None:
        body[key] = value


def _message(m: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role}
    content = m.content
    if content is None or isinstance(content, str):
        # An assistant turn that only calls tools has null content; others need a string.
        out["content"] = content if content is not None or m.role == "assistant" else ""
    else:
        out["content"] = [_part(p) for p in content]
    if m.name is not None:
        out["name"] = m.name
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def _part(part: Any) -> dict[str, Any]:
    if isinstance(part, ImagePart):
        image: dict[str, Any] = {"url": part.url}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    return {"type": "text", "text": part.text}


def _tool(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    _put(function, "description", tool.description)
    _put(function, "parameters", tool.parameters)
    _put(function, "strict", tool.strict)
    return {"type": "function", "function": function}


def _tool_choice(choice: str | NamedToolChoice) -> Any:
    if isinstance(choice, NamedToolChoice):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def finish_reason(value: object, saw_tool_calls: bool) -> FinishReason:
    """The IR finish reason; unknown values mean a normal stop.

    Some OpenAI-compatible servers (Ollama, older vLLM) say "stop" after emitting tool
    calls; clients decide whether to run tools from this field, so report "tool_calls".
    """
    reason = _FINISH.get(value, "stop") if isinstance(value, str) else "stop"
    if reason == "stop" and saw_tool_calls:
        return "tool_calls"
    return reason


def usage_from(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    prompt_details = obj(raw.get("prompt_tokens_details"))
    completion_details = obj(raw.get("completion_tokens_details"))
    # DeepSeek reports cache hits at the top level instead of in the details.
    cached = count(prompt_details.get("cached_tokens")) or count(raw.get("prompt_cache_hit_tokens"))
    cost = raw.get("cost")  # OpenRouter's own figure
    return Usage(
        prompt_tokens=count(raw.get("prompt_tokens")),
        completion_tokens=count(raw.get("completion_tokens")),
        cached_prompt_tokens=cached,
        reasoning_tokens=count(completion_details.get("reasoning_tokens")),
        cost_usd=usd(cost),
    )


def events_from_response(provider: str, doc: Any) -> list[Event]:
    """A complete (non-streaming) answer as events."""
    if not isinstance(doc, dict):
        raise _malformed(provider, "answer is not a JSON object")
    if doc.get("error"):
        raise error_from_payload(provider, doc["error"])
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _malformed(provider, "answer has no choices")
    choice = choices[0]
    message = obj(choice.get("message"))
    events: list[Event] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        events.append(ReasoningDelta(reasoning))
    content = message.get("content")
    if isinstance(content, str) and content:
        events.append(TextDelta(content))
    calls = _tool_calls(provider, message.get("tool_calls"))
    for i, call in enumerate(calls):
        function = obj(call.get("function"))
        args = function.get("arguments")
        events.append(
            ToolCallDelta(
                index=i,
                id=text(call.get("id")),
                name=text(function.get("name")),
                # Some servers send the arguments as an object rather than JSON text.
                arguments=args if isinstance(args, str) else json_text(args),
            )
        )
    usage = usage_from(doc.get("usage"))
    if usage is not None:
        events.append(usage)
    events.append(Finish(finish_reason(choice.get("finish_reason"), bool(calls))))
    return events


def _tool_calls(provider: str, raw: object) -> list[dict[str, Any]]:
    """A message's or a delta's `tool_calls`: a list of objects (null or absent: none)."""
    if not raw:
        return []
    if not isinstance(raw, list) or not all(isinstance(call, dict) for call in raw):
        raise _malformed(provider, f"tool_calls is not a list of objects: {str(raw)[:120]!r}")
    return raw


class StreamParser:
    """Chat Completions SSE `data:` payloads → events. `done` once `[DONE]` arrived."""

    __slots__ = ("_finish", "_provider", "_tool_calls", "_usage", "done")

    def __init__(self, provider: str) -> None:
        self._provider = provider
        self._finish: object = None
        self._usage: Usage | None = None
        self._tool_calls = False
        self.done = False

    def feed_message(self, message: SSEMessage) -> list[Event]:
        return self.feed(message.data)  # (the `event:` line carries nothing here)

    def feed(self, data: str) -> list[Event]:
        if data == "[DONE]":
            return self.end()
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise _malformed(self._provider, f"{exc} in {data[:120]!r}") from exc
        if not isinstance(chunk, dict):
            raise _malformed(self._provider, f"chunk is not an object: {data[:120]!r}")
        if chunk.get("error"):
            raise error_from_payload(self._provider, chunk["error"])
        usage = chunk.get("usage")
        if usage:
            self._usage = usage_from(usage)
        choices = items(chunk.get("choices"))
        if not choices:
            return []
        choice = obj(choices[0])
        if choice.get("finish_reason"):
            self._finish = choice["finish_reason"]
        return self._delta(obj(choice.get("delta")))

    def end(self) -> list[Event]:
        """The stream is complete: usage, then the held finish."""
        self.done = True
        reason = finish_reason(self._finish, self._tool_calls)
        if self._usage is None:
            return [Finish(reason)]
        return [self._usage, Finish(reason)]

    def _delta(self, delta: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and isinstance(reasoning, str):
            events.append(ReasoningDelta(reasoning))
        # Empty strings are not content: the role-only first chunk must not commit a hop.
        content = delta.get("content")
        if content and isinstance(content, str):
            events.append(TextDelta(content))
        calls = _tool_calls(self._provider, delta.get("tool_calls"))
        if calls:
            self._tool_calls = True
            for position, call in enumerate(calls):
                function = obj(call.get("function"))
                index = call.get("index", position)
                events.append(
                    ToolCallDelta(
                        # Servers that send each call whole omit the index.
                        index=index if _is_index(index) else position,
                        id=text(call.get("id")) or None,
                        name=text(function.get("name")) or None,
                        arguments=text(function.get("arguments")) or "",
                    )
                )
        return events


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1024


def _malformed(provider: str, detail: str) -> ProviderError:
    return ProviderError(
        Failure.UPSTREAM_ERROR, f"malformed response from upstream: {detail}", provider=provider
    )
