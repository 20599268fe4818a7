"""IR -> OpenAI Chat Completions JSON: streaming chunks, whole completions, errors.

Shapes follow what api.openai.com sends, so the official SDKs parse them unchanged:
- the first chunk with a choice carries `"role": "assistant"` in its delta;
- a tool call's `id` and `"type": "function"` come only with its first piece, since SDK
  accumulators concatenate repeated strings; a provider that gave no id gets a
  deterministic one (`call_` + 24 hex digits from the completion id and the call index);
- with `include_usage`, `done()` always sends the usage chunk, with zeros when no usage
  was seen: clients that wait for it (token counters, LangChain) must not hang or crash.

Text with lone surrogates (possible from providers decoding JSON with the standard
library) cannot be UTF-8; it is repaired with U+FFFD rather than failing the stream.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from olp.errors import OLPError
from olp.ir import ChatResponse, Event, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage
from olp.wire._json import dumps as _dumps

__all__ = ["ChunkEncoder", "completion_body", "error_body", "usage_dict"]

_DONE = b"data: [DONE]\n\n"
_KEEPALIVE = b": keepalive\n\n"
_END = b"\n\n"
_CHOICE_CLOSE = b',"logprobs":null,"finish_reason":null}]}\n\n'


def usage_dict(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def error_body(err: OLPError) -> bytes:
    """`{"error": {message, type, code, param}}`, plus `provider` when one is named."""
    error: dict[str, Any] = {
        "message": str(err.message),
        "type": err.type,
        "code": err.code,
        "param": err.param,
    }
    if err.provider:
        error["provider"] = err.provider
    return _dumps({"error": error})


def completion_body(response: ChatResponse, completion_id: str, model: str, created: int) -> bytes:
    """A non-streaming `chat.completion` object."""
    message: dict[str, Any] = {"role": "assistant", "content": response.text, "refusal": None}
    if response.reasoning is not None:
        message["reasoning_content"] = response.reasoning
    if response.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or _call_id(completion_id, index),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for index, call in enumerate(response.tool_calls)
        ]
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": response.finish_reason,
            }
        ],
    }
    if response.usage is not None:
        body["usage"] = usage_dict(response.usage)
    return _dumps(body)


class ChunkEncoder:
    """Turns one answer's events into `chat.completion.chunk` SSE frames.

    One encoder per response. The constant part of every chunk is serialised once, so a
    text delta costs one small `orjson.dumps` and two concatenations.
    """

    __slots__ = (
        "_announced",
        "_completion_id",
        "_head",
        "_include_usage",
        "_open",
        "_role_sent",
        "_usage",
    )

    def __init__(self, completion_id: str, model: str, created: int, include_usage: bool) -> None:
        head = _dumps(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
            }
        )
        # `data: {"id":…,"model":…,` — the object left open for what follows.
        self._head = b"data: " + head[:-1] + b","
        self._open = self._head + b'"choices":[{"index":0,"delta":'
        self._completion_id = completion_id
        self._include_usage = include_usage
        self._role_sent = False
        self._usage: Usage | None = None
        # Tool call indexes already announced (their id went out with the first piece).
        self._announced: set[int] = set()

    def encode(self, event: Event) -> bytes:
        """Zero or more complete SSE frames for one event (b"" when nothing is sent)."""
        if isinstance(event, TextDelta):
            return self._delta({"content": event.text}) if event.text else b""
        if isinstance(event, ToolCallDelta):
            return self._tool_call(event)
        if isinstance(event, ReasoningDelta):
            return self._delta({"reasoning_content": event.text}) if event.text else b""
        if isinstance(event, Finish):
            return self._finish(event)
        if isinstance(event, Usage):
            # Kept for done(), which sends it after the finish chunk as OpenAI does.
            self._usage = event
        return b""  # (RawBody: only forwarded endpoints' answers carry it)

    def start(self) -> bytes:
        return b""  # Chat Completions has no opening frame: the first chunk starts it

    def done(self) -> bytes:
        """The end of the stream: the usage chunk when asked for, then `[DONE]`."""
        if not self._include_usage:
            return _DONE
        usage = usage_dict(self._usage or Usage())
        return self._head + b'"choices":[],"usage":' + orjson.dumps(usage) + b"}" + _END + _DONE

    def keepalive(self) -> bytes:
        return _KEEPALIVE

    def error_frame(self, err: OLPError) -> bytes:
        """A final in-stream error, for failures after the response was committed."""
        return b"data: " + error_body(err) + _END

    def _delta(self, delta: dict[str, Any]) -> bytes:
        if not self._role_sent:
            self._role_sent = True
            delta = {"role": "assistant", **delta}
        return self._open + _dumps(delta) + _CHOICE_CLOSE

    def _tool_call(self, event: ToolCallDelta) -> bytes:
        call: dict[str, Any] = {"index": event.index}
        if event.index not in self._announced:
            self._announced.add(event.index)
            call["id"] = event.id or _call_id(self._completion_id, event.index)
            call["type"] = "function"
        elif not event.name and not event.arguments:
            return b""
        # A later id is dropped: clients would append it to the first one.
        call["function"] = (
            {"name": event.name, "arguments": event.arguments}
            if event.name
            else {"arguments": event.arguments}
        )
        return self._delta({"tool_calls": [call]})

    def _finish(self, event: Finish) -> bytes:
        delta = b"{}"
        if not self._role_sent:
            # An answer with no content still tells the client whose turn it was.
            self._role_sent = True
            delta = b'{"role":"assistant","content":""}'
        reason = orjson.dumps(event.reason)
        return self._open + delta + b',"logprobs":null,"finish_reason":' + reason + b"}]}" + _END


def _call_id(completion_id: str, index: int) -> str:
    digest = hashlib.sha256(f"{completion_id}\0{index}".encode("utf-8", "surrogatepass"))
    return "call_" + digest.hexdigest()[:24]
