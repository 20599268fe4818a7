"""A fake upstream for the real Codex and Gemini CLIs: OpenAI **Responses** and **Gemini**.

    with ResponsesGeminiUpstream() as up:
        up.script(Status(429, ...), Text("hi"))
        ... point codex at up.openai_base_url (POST /v1/responses), gemini at up.base_url
        (POST /v1beta/models/{model}:streamGenerateContent?alt=sse) ...

It is `FakeUpstream` (same thread-and-loop server, same FIFO script of behaviours, same
request recording; its Chat Completions and Messages routes stay) with two more wire
formats, shaped like what the real APIs send and what the CLIs need (captured with
`fixtures/cli/_tools/fakellm.py`): Codex wants `response.created`, the output item and
content part events, `response.output_text.delta`s and `response.completed` with usage;
Gemini CLI wants SSE `data:` frames of `candidates[].content.parts[].text` with
`usageMetadata`, the last with `finishReason: "STOP"`.

Behaviours understood on these routes: `Text` (streamed in `chunks` pieces; its
`headers` go on the answer, e.g. `CODEX_RATE_LIMIT_HEADERS`), `Status` (an error answer:
see `responses_usage_limit`, `gemini_error`), `Hang` and `DieMidStream`; and `ToolCalls`:
on the Gemini route its `text` (if any), then one frame with a `functionCall` part per
call (several: parallel calls), as Gemini sends them; what the CLI offered the model and
sent back is in the recorded body: `gemini_tool_names()` and `gemini_function_responses()`.
On the Responses route one `function_call` output item per call (call ids
`call_fake_<n>`, arguments streamed in `chunks` pieces), after a message item when it has
`text`; `offered_tools(request)` and `tool_outputs(request)` read what a recorded request
carried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from aiohttp import web

from fakes import _formats as fmt
from fakes.upstream import (
    Behaviour,
    DieMidStream,
    FakeUpstream,
    Hang,
    RecordedRequest,
    Status,
    Text,
    ToolCalls,
    _ClientGone,
    _status,
)

__all__ = [
    "ResponsesGeminiUpstream",
    "codex_rate_limit_headers",
    "gemini_error",
    "gemini_function_responses",
    "gemini_tool_names",
    "offered_names",
    "offered_tools",
    "responses_error",
    "responses_usage_limit",
    "tool_outputs",
]

_PROMPT_TOKENS = 30


def responses_error(status: int, message: str, code: str, type_: str) -> Status:
    """An OpenAI-style error body (`{"error": {message, type, param, code}}`)."""
    return Status(
        status, {"error": {"message": message, "type": type_, "param": None, "code": code}}
    )


def responses_usage_limit(resets_in_s: int = 3600) -> Status:
    """ChatGPT's plan limit: 429 `usage_limit_reached` with `resets_at` (what Codex renders
    as "You've hit your usage limit … try again at <time>")."""
    error = {
        "type": "usage_limit_reached",
        "message": "The usage limit has been reached",
        "plan_type": "plus",
        "resets_at": int(time.time()) + resets_in_s,
        "resets_in_seconds": resets_in_s,
    }
    return Status(429, {"error": error})


def gemini_error(status: int, message: str, google_status: str) -> Status:
    """A Google API error body (`{"error": {code, message, status}}`)."""
    return Status(status, {"error": {"code": status, "message": message, "status": google_status}})


def codex_rate_limit_headers(
    primary_used: float = 88, secondary_used: float = 41
) -> dict[str, str]:
    """The `x-codex-*` rate-limit headers ChatGPT's backend sends on every turn."""
    now = int(time.time())
    return {
        "x-codex-primary-used-percent": str(primary_used),
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": str(now + 3600),
        "x-codex-secondary-used-percent": str(secondary_used),
        "x-codex-secondary-window-minutes": "10080",
        "x-codex-secondary-reset-at": str(now + 4 * 86400),
    }


class ResponsesGeminiUpstream(FakeUpstream):
    """See the module docstring."""

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1beta/models/{spec}", self._gemini)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]

    @property
    def gemini_base_url(self) -> str:
        return self.base_url

    # -- Responses ---------------------------------------------------------------------

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        recorded, behaviour = await self._record(request)
        body = recorded.json if isinstance(recorded.json, dict) else {}
        model = str(body.get("model") or "fake-model")
        frames = _ResponsesFrames(model)
        try:
            if isinstance(behaviour, ToolCalls):
                resp = await self._prepare(request, behaviour.headers)
                for data in frames.tool_calls(behaviour, _namespaces(offered_tools(recorded))):
                    await self._write(request, resp, data)
                await resp.write_eof()
                return resp
            return await self._answer_with(request, behaviour, frames)
        except _ClientGone:
            return self._gone(recorded)

    # -- Gemini ------------------------------------------------------------------------

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        recorded, behaviour = await self._record(request)
        model, _, method = request.match_info["spec"].partition(":")
        if method == "countTokens":
            return web.json_response({"totalTokens": _PROMPT_TOKENS})
        try:
            return await self._answer_with(request, behaviour, _GeminiFrames(model))
        except _ClientGone:
            return self._gone(recorded)

    # -- shared ------------------------------------------------------------------------

    async def _answer_with(
        self, request: web.Request, behaviour: Behaviour | None, frames: _Frames
    ) -> web.StreamResponse:
        if behaviour is None:
            behaviour = Text(fmt.DEFAULT_TEXT)
        if isinstance(behaviour, Status):
            return _status(behaviour)
        if isinstance(behaviour, Hang):
            await self._sleep(request, behaviour.seconds)
            return web.Response(status=504, text="fake upstream hung up")
        if isinstance(behaviour, DieMidStream):
            resp = await self._prepare(request, {})
            pieces = fmt.split(fmt.DEFAULT_TEXT * 4, behaviour.after_chunks + 2)
            for data in frames.head() + [frames.delta(p) for p in pieces[: behaviour.after_chunks]]:
                await self._write(request, resp, data)
            await self._sleep(request, 0.1)
            if request.transport is not None:
                request.transport.abort()
            return resp
        if isinstance(behaviour, ToolCalls):
            return await self._tool_calls(request, behaviour, frames)
        if not isinstance(behaviour, Text):
            raise NotImplementedError(f"{type(behaviour).__name__} on this route")
        resp = await self._prepare(request, behaviour.headers)
        pieces = fmt.split(behaviour.text, behaviour.chunks)
        for data in frames.head():
            await self._write(request, resp, data)
        for i, piece in enumerate(pieces):
            if behaviour.delay_s:
                await self._sleep(request, behaviour.delay_s)
            last = i == len(pieces) - 1
            await self._write(request, resp, frames.delta(piece, last=last))
        for data in frames.tail(behaviour.text, len(pieces)):
            await self._write(request, resp, data)
        await resp.write_eof()
        return resp

    async def _tool_calls(
        self, request: web.Request, behaviour: ToolCalls, frames: _Frames
    ) -> web.StreamResponse:
        resp = await self._prepare(request, behaviour.headers)
        if behaviour.text:
            await self._write(request, resp, frames.delta(behaviour.text))
        await self._write(request, resp, frames.calls(behaviour.calls))
        await resp.write_eof()
        return resp


class _Frames:
    def head(self) -> list[bytes]:
        return []

    def calls(self, calls: Sequence[tuple[str, str]]) -> bytes:
        raise NotImplementedError(f"ToolCalls on {type(self).__name__}")

    def delta(self, text: str, *, last: bool = False) -> bytes:
        raise NotImplementedError

    def tail(self, text: str, chunks: int) -> list[bytes]:
        return []


class _ResponsesFrames(_Frames):
    """OpenAI Responses API streaming events (`event:` + `data:`)."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = f"resp_fake_{int(time.time() * 1000)}"
        self.item = f"msg_fake_{int(time.time() * 1000)}"
        self.seq = 0

    def _event(self, name: str, doc: dict[str, Any]) -> bytes:
        doc = {"type": name, "sequence_number": self.seq, **doc}
        self.seq += 1
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n"

    def _response(self, status: str, output: list[Any], usage: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": int(time.time()),
            "model": self.model,
            "status": status,
            "output": output,
            "usage": usage,
        }

    def _message(self, text: str, status: str) -> dict[str, Any]:
        content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
        return {
            "type": "message",
            "id": self.item,
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def head(self) -> list[bytes]:
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            self._event("response.created", {"response": self._response("in_progress", [], None)}),
            self._event(
                "response.in_progress", {"response": self._response("in_progress", [], None)}
            ),
            self._event(
                "response.output_item.added",
                {"output_index": 0, "item": self._message("", "in_progress")},
            ),
            self._event(
                "response.content_part.added",
                {"item_id": self.item, "output_index": 0, "content_index": 0, "part": part},
            ),
        ]

    def delta(self, text: str, *, last: bool = False) -> bytes:
        return self._event(
            "response.output_text.delta",
            {"item_id": self.item, "output_index": 0, "content_index": 0, "delta": text},
        )

    def tail(self, text: str, chunks: int) -> list[bytes]:
        where = {"item_id": self.item, "output_index": 0, "content_index": 0}
        part = {"type": "output_text", "text": text, "annotations": []}
        item = self._message(text, "completed")
        usage = {
            "input_tokens": _PROMPT_TOKENS,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": chunks,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": _PROMPT_TOKENS + chunks,
        }
        return [
            self._event("response.output_text.done", {**where, "text": text}),
            self._event("response.content_part.done", {**where, "part": part}),
            self._event("response.output_item.done", {"output_index": 0, "item": item}),
            self._event(
                "response.completed", {"response": self._response("completed", [item], usage)}
            ),
        ]

    def tool_calls(self, behaviour: ToolCalls, namespaces: Mapping[str, str]) -> list[bytes]:
        """A whole answer: `behaviour.text` as a message item, then a function_call item
        per call, then `response.completed` listing them all. A call of a tool the request
        offered inside a `namespace` tool carries that namespace, as the real API's does."""
        created = self._response("in_progress", [], None)
        out = [
            self._event("response.created", {"response": created}),
            self._event("response.in_progress", {"response": created}),
        ]
        items: list[dict[str, Any]] = []
        if behaviour.text:
            item = self._message(behaviour.text, "completed")
            out.append(self._event("response.output_item.added", {"output_index": 0, "item": item}))
            out.append(self._event("response.output_item.done", {"output_index": 0, "item": item}))
            items.append(item)
        for i, (name, arguments) in enumerate(behaviour.calls):
            index = len(items)
            item = {
                "type": "function_call",
                "id": f"fc_fake_{i}",
                "call_id": f"call_fake_{i}",
                "name": name,
                "arguments": "",
                "status": "in_progress",
            }
            if name in namespaces:
                item["namespace"] = namespaces[name]
            where = {"item_id": item["id"], "output_index": index}
            out.append(
                self._event("response.output_item.added", {"output_index": index, "item": item})
            )
            for piece in fmt.split(arguments, behaviour.chunks) if arguments else []:
                out.append(
                    self._event("response.function_call_arguments.delta", {**where, "delta": piece})
                )
            out.append(
                self._event(
                    "response.function_call_arguments.done", {**where, "arguments": arguments}
                )
            )
            done = {**item, "arguments": arguments, "status": "completed"}
            out.append(
                self._event("response.output_item.done", {"output_index": index, "item": done})
            )
            items.append(done)
        usage = {
            "input_tokens": _PROMPT_TOKENS,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": _PROMPT_TOKENS + 7,
        }
        completed = self._response("completed", items, usage)
        out.append(self._event("response.completed", {"response": completed}))
        return out


class _GeminiFrames(_Frames):
    """`streamGenerateContent?alt=sse`: `data:` frames of GenerateContentResponse."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.sent = 0

    def delta(self, text: str, *, last: bool = False) -> bytes:
        self.sent += 1
        candidate: dict[str, Any] = {
            "content": {"parts": [{"text": text}], "role": "model"},
            "index": 0,
        }
        usage: dict[str, Any] = {
            "promptTokenCount": _PROMPT_TOKENS,
            "totalTokenCount": _PROMPT_TOKENS,
        }
        if last:
            candidate["finishReason"] = "STOP"
            usage = {
                "promptTokenCount": _PROMPT_TOKENS,
                "candidatesTokenCount": self.sent,
                "totalTokenCount": _PROMPT_TOKENS + self.sent,
            }
        doc = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": self.model}
        return b"data: " + orjson.dumps(doc) + b"\n\n"

    def calls(self, calls: Sequence[tuple[str, str]]) -> bytes:
        """The model's turn ends with its function calls, all in one frame."""
        parts = [
            {"functionCall": {"name": name, "args": orjson.loads(args)}} for name, args in calls
        ]
        candidate = {
            "content": {"parts": parts, "role": "model"},
            "finishReason": "STOP",
            "index": 0,
        }
        usage = {
            "promptTokenCount": _PROMPT_TOKENS,
            "candidatesTokenCount": len(calls),
            "totalTokenCount": _PROMPT_TOKENS + len(calls),
        }
        doc = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": self.model}
        return b"data: " + orjson.dumps(doc) + b"\n\n"


def gemini_tool_names(body: Any) -> list[str]:
    """The function names a recorded Gemini request offered its model, sorted."""
    tools = body.get("tools", []) if isinstance(body, dict) else []
    return sorted(
        str(declaration.get("name"))
        for tool in tools
        for declaration in tool.get("functionDeclarations", [])
    )


def gemini_function_responses(body: Any) -> list[dict[str, Any]]:
    """The `functionResponse` parts of a recorded Gemini request, oldest first."""
    contents = body.get("contents", []) if isinstance(body, dict) else []
    return [
        part["functionResponse"]
        for content in contents
        for part in content.get("parts", [])
        if isinstance(part, dict) and "functionResponse" in part
    ]


def requests_to(up: FakeUpstream, path_part: str) -> list[RecordedRequest]:
    """The recorded requests whose path contains `path_part`."""
    return [r for r in up.requests if path_part in r.path]


def offered_tools(request: RecordedRequest) -> list[dict[str, Any]]:
    """The `tools` a recorded Responses request offered the model."""
    body = request.json if isinstance(request.json, dict) else {}
    tools = body.get("tools")
    return [tool for tool in tools if isinstance(tool, dict)] if isinstance(tools, list) else []


def offered_names(request: RecordedRequest) -> list[str]:
    """The names of the function tools a recorded Responses request offered, sorted: a
    tool inside a `namespace` tool is `<namespace>.<name>`."""
    names = []
    for tool in offered_tools(request):
        inner = tool.get("tools") if tool.get("type") == "namespace" else None
        if isinstance(inner, list):
            names += [f"{tool.get('name')}.{t.get('name')}" for t in inner if isinstance(t, dict)]
        else:
            names.append(str(tool.get("name") or tool.get("type")))
    return sorted(names)


def _namespaces(tools: list[dict[str, Any]]) -> dict[str, str]:
    """tool name → the namespace tool that offers it."""
    found: dict[str, str] = {}
    for tool in tools:
        inner = tool.get("tools") if tool.get("type") == "namespace" else None
        for member in inner if isinstance(inner, list) else ():
            if isinstance(member, dict):
                found[str(member.get("name"))] = str(tool.get("name"))
    return found


def tool_outputs(request: RecordedRequest) -> dict[str, str]:
    """The `function_call_output` items of a recorded Responses request: call id → output."""
    body = request.json if isinstance(request.json, dict) else {}
    items = body.get("input")
    found: dict[str, str] = {}
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            found[str(item.get("call_id"))] = output if isinstance(output, str) else str(output)
    return found
