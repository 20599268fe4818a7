"""A fake LLM upstream: a real aiohttp server on 127.0.0.1, in a thread with its own loop.

    with FakeUpstream() as up:
        up.script(Status(429, headers={"Retry-After": "3"}), Text("hi", chunks=2))
        ... point a provider at up.openai_base_url (OpenAI) or up.base_url (Anthropic) ...
        assert up.calls == 2

Routes: `POST /v1/chat/completions` (OpenAI), `POST /v1/messages` (Anthropic),
`GET /v1/models`. Each request takes the next scripted behaviour (FIFO); with none left it
answers "Hello from fake upstream" in the endpoint's format, streamed iff the request
asked for `stream`. Every request is recorded (`requests`); a request whose client went
away before its response finished is also recorded in `disconnects`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from fakes import _formats as fmt

__all__ = [
    "DEFAULT_TEXT",
    "Behaviour",
    "DieMidStream",
    "ErrorEvent",
    "FakeUpstream",
    "Garbage",
    "Hang",
    "RecordedRequest",
    "Slow",
    "Status",
    "Text",
    "Thinking",
    "ToolCalls",
]

DEFAULT_TEXT = fmt.DEFAULT_TEXT


@dataclass(frozen=True)
class Text:
    """A text answer in `chunks` pieces, `delay_s` apart. `usage`: the raw usage object.

    `hold`: a streamed answer stops after `hold_at` content chunks (0: before the headers)
    until the test sets it, so a test can act at a known point of the stream.
    """

    text: str = DEFAULT_TEXT
    chunks: int = 3
    delay_s: float = 0.0
    usage: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    finish_reason: str | None = None  # the upstream's own word; default stop / end_turn
    stop_sequence: str | None = None  # Anthropic's: the stop sequence that ended it
    hold: threading.Event | None = None
    hold_at: int = 1


@dataclass(frozen=True)
class ToolCalls:
    """Tool calls as [(name, arguments_json)], each call's arguments in `chunks` pieces."""

    calls: Sequence[tuple[str, str]]
    chunks: int = 2
    text: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Thinking:
    """A signed thinking block, then `text` (OpenAI: `reasoning_content`, then content)."""

    thinking: str = "Let me think."
    signature: str = "sig-fake"
    text: str = DEFAULT_TEXT


@dataclass(frozen=True)
class Status:
    """An error answer. `body`: a dict sent as JSON, or text; None: a default JSON error."""

    status: int
    body: Mapping[str, Any] | str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """Accept the request, then send nothing for `seconds` (or until the client leaves)."""

    seconds: float = 30.0


@dataclass(frozen=True)
class DieMidStream:
    """Send `after_chunks` content chunks of a streamed answer, then abort the TCP connection.

    A non-streaming request gets half of its JSON body (Content-Length announces all of it).
    """

    after_chunks: int = 2


@dataclass(frozen=True)
class Slow:
    """The default answer: headers after `first_byte_delay_s`, chunks `chunk_delay_s` apart."""

    first_byte_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    text: str = DEFAULT_TEXT
    chunks: int = 3


@dataclass(frozen=True)
class Garbage:
    """`body` as a 200 answer, verbatim."""

    body: bytes = b"\x00this is not json{"
    content_type: str = "application/json"


@dataclass(frozen=True)
class ErrorEvent:
    """A mid-stream error (OpenAI `data: {"error"}` frame / Anthropic `event: error`)."""

    type: str = "overloaded_error"
    message: str = "Overloaded"
    code: str | None = None
    after_chunks: int = 1


Behaviour = Text | ToolCalls | Thinking | Status | Hang | DieMidStream | Slow | Garbage | ErrorEvent


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: Mapping[str, str]
    json: Any
    # The client's source port: equal for two requests iff they shared a kept-alive connection.
    peer_port: int | None = None


class _ClientGone(Exception):
    """The client closed the connection before the answer was complete."""


class FakeUpstream:
    """See the module docstring. Start with `with` or `start()`/`stop()`."""

    def __init__(self) -> None:
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self.disconnects: list[RecordedRequest] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> FakeUpstream:
        ready = threading.Event()
        failure: list[BaseException] = []
        self._stopping = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run, args=(ready, failure), name="fake-upstream", daemon=True
        )
        self._thread.start()
        if not ready.wait(10) or failure:
            self.stop()
            raise RuntimeError(f"fake upstream did not start: {failure}")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._stopping = True
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = None

    def _run(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start(), which raises
            failure.append(exc)
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            if self._runner is not None:
                loop.run_until_complete(self._runner.cleanup())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/v1/completions", self._completions)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        # A real API's listen queue is deep; aiohttp's default (128) would make a burst of
        # connections wait for SYN retries, which is the fake's limit, not OLP's.
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=2048)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]

    # -- test API ----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def calls(self) -> int:
        return len(self.requests)

    def script(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Poll `predicate` until it holds or `timeout` passes; whether it held."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    # -- handlers ----------------------------------------------------------------------

    async def _record(self, request: web.Request) -> tuple[RecordedRequest, Behaviour | None]:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        transport = request.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        port = peer[1] if isinstance(peer, tuple) else None
        # Case-insensitive like HTTP: both `headers["authorization"]` and "Authorization" work.
        headers = CIMultiDictProxy(CIMultiDict(request.headers))
        recorded = RecordedRequest(request.path, headers, body, port)
        with self._lock:
            self.requests.append(recorded)
            behaviour = self._queue.popleft() if self._queue else None
        return recorded, behaviour

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, fmt.OPENAI)

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, fmt.ANTHROPIC)

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        """A vector per input string (its length and first letter: easy to check)."""
        recorded, behaviour = await self._record(request)
        if isinstance(behaviour, Status):
            return _status(behaviour)
        body = recorded.json if isinstance(recorded.json, dict) else {}
        inputs = body.get("input")
        texts = inputs if isinstance(inputs, list) else [inputs]
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(str(t))), 0.5]}
            for i, t in enumerate(texts)
        ]
        tokens = sum(len(str(t).split()) for t in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        model = str(body.get("model") or "fake-embedder")
        return web.json_response({"object": "list", "data": data, "model": model, "usage": usage})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        """A legacy completion: the text between `prompt` and `suffix` (FIM), whole or streamed."""
        recorded, behaviour = await self._record(request)
        if isinstance(behaviour, Status):
            return _status(behaviour)
        body = recorded.json if isinstance(recorded.json, dict) else {}
        text = behaviour.text if isinstance(behaviour, Text) else "    return a + b\n"
        model = str(body.get("model") or "fake-completer")
        usage = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
        base = {"id": "cmpl-fake", "object": "text_completion", "created": 1, "model": model}
        if not body.get("stream"):
            choice = {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}
            return web.json_response({**base, "choices": [choice], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece, finish in ((text[: len(text) // 2], None), (text[len(text) // 2 :], "stop")):
            choice = {"index": 0, "text": piece, "finish_reason": finish, "logprobs": None}
            chunk = {**base, "choices": [choice]}
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk = {**base, "choices": [], "usage": usage}
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _models(self, request: web.Request) -> web.StreamResponse:
        recorded, behaviour = await self._record(request)
        try:
            if isinstance(behaviour, Status):
                return _status(behaviour)
            if isinstance(behaviour, Hang):
                await self._sleep(request, behaviour.seconds)
            return web.json_response(fmt.models())
        except _ClientGone:
            return self._gone(recorded)

    async def _answer(self, request: web.Request, kind: fmt.Format) -> web.StreamResponse:
        recorded, behaviour = await self._record(request)
        body = recorded.json if isinstance(recorded.json, dict) else {}
        stream = bool(body.get("stream"))
        usage_wanted = bool((body.get("stream_options") or {}).get("include_usage"))
        model = str(body.get("model") or "fake-model")
        try:
            return await self._behave(request, kind, behaviour, stream, usage_wanted, model)
        except _ClientGone:
            return self._gone(recorded)
        except asyncio.CancelledError:
            self._gone(recorded)
            raise

    async def _behave(
        self,
        request: web.Request,
        kind: fmt.Format,
        behaviour: Behaviour | None,
        stream: bool,
        usage_wanted: bool,
        model: str,
    ) -> web.StreamResponse:
        if behaviour is None:
            behaviour = Text()
        if isinstance(behaviour, Status):
            return _status(behaviour)
        if isinstance(behaviour, Garbage):
            return web.Response(body=behaviour.body, content_type=behaviour.content_type)
        if isinstance(behaviour, Hang):
            await self._sleep(request, behaviour.seconds)
            return web.Response(status=504, text="fake upstream hung up")
        if isinstance(behaviour, Slow):
            await self._sleep(request, behaviour.first_byte_delay_s)
            behaviour_text = Text(behaviour.text, behaviour.chunks, behaviour.chunk_delay_s)
            return await self._text(request, kind, behaviour_text, stream, usage_wanted, model)
        if isinstance(behaviour, Text):
            return await self._text(request, kind, behaviour, stream, usage_wanted, model)
        if isinstance(behaviour, ToolCalls):
            return await self._tools(request, kind, behaviour, stream, usage_wanted, model)
        if isinstance(behaviour, Thinking):
            b = behaviour
            if not stream:
                doc = fmt.thinking_message(kind, model, b.thinking, b.signature, b.text)
                return web.json_response(doc)
            frames = fmt.thinking_stream(kind, model, b.thinking, b.signature, b.text)
            return await self._stream(request, frames, 0.0, {}, usage_wanted)
        if isinstance(behaviour, DieMidStream):
            if not stream:
                return await self._die_in_body(request, kind, model)
            return await self._die(request, kind, behaviour, model)
        return await self._error_event(request, kind, behaviour, stream, model)

    async def _text(
        self,
        request: web.Request,
        kind: fmt.Format,
        b: Text,
        stream: bool,
        usage_wanted: bool,
        model: str,
    ) -> web.StreamResponse:
        if not stream:
            doc = fmt.text_message(kind, model, b.text, b.usage, b.finish_reason, b.stop_sequence)
            return web.json_response(doc, headers=b.headers)
        frames = fmt.text_stream(
            kind, model, b.text, b.chunks, b.usage, b.finish_reason, b.stop_sequence
        )
        hold = (b.hold, b.hold_at) if b.hold is not None else None
        return await self._stream(request, frames, b.delay_s, b.headers, usage_wanted, hold)

    async def _tools(
        self,
        request: web.Request,
        kind: fmt.Format,
        b: ToolCalls,
        stream: bool,
        usage_wanted: bool,
        model: str,
    ) -> web.StreamResponse:
        if not stream:
            return web.json_response(
                fmt.tool_message(kind, model, b.calls, b.text), headers=b.headers
            )
        frames = fmt.tool_stream(kind, model, b.calls, b.chunks, b.text)
        return await self._stream(request, frames, 0.0, b.headers, usage_wanted)

    async def _die(
        self, request: web.Request, kind: fmt.Format, b: DieMidStream, model: str
    ) -> web.StreamResponse:
        frames = fmt.text_stream(kind, model, DEFAULT_TEXT * 4, b.after_chunks + 2, None, None)
        resp = await self._prepare(request, {})
        for frame in fmt.content_prefix(kind, frames, b.after_chunks):
            await self._write(request, resp, frame)
        # Let the client read what was sent: an abort discards what it has not read yet.
        await asyncio.sleep(0.1)
        transport = request.transport
        if transport is not None:
            transport.abort()
        return resp

    async def _die_in_body(
        self, request: web.Request, kind: fmt.Format, model: str
    ) -> web.StreamResponse:
        """Non-streaming: announce a whole JSON body, send half of it, abort."""
        body = orjson.dumps(fmt.text_message(kind, model, DEFAULT_TEXT * 4, None, None))
        self._check(request)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = len(body)
        try:
            await resp.prepare(request)
        except ConnectionError as exc:
            raise _ClientGone from exc
        await self._write(request, resp, body[: len(body) // 2])
        await asyncio.sleep(0.1)
        transport = request.transport
        if transport is not None:
            transport.abort()
        return resp

    async def _error_event(
        self, request: web.Request, kind: fmt.Format, b: ErrorEvent, stream: bool, model: str
    ) -> web.StreamResponse:
        error = fmt.error_frame(kind, b.type, b.message, b.code)
        if not stream:
            return web.json_response(orjson.loads(error.split(b"data: ", 1)[1]))
        frames = fmt.text_stream(kind, model, DEFAULT_TEXT, b.after_chunks + 1, None, None)
        resp = await self._prepare(request, {})
        for frame in fmt.content_prefix(kind, frames, b.after_chunks):
            await self._write(request, resp, frame)
        await self._write(request, resp, error)
        await resp.write_eof()
        return resp

    # -- plumbing ----------------------------------------------------------------------

    async def _stream(
        self,
        request: web.Request,
        frames: list[fmt.Frame],
        delay_s: float,
        headers: Mapping[str, str],
        usage_wanted: bool,
        hold: tuple[threading.Event, int] | None = None,
    ) -> web.StreamResponse:
        """`hold`: (event, n) waits for the event once n content frames are out."""
        content_sent = 0
        if hold is not None and hold[1] == 0:
            await self._until(request, hold[0])
        resp = await self._prepare(request, headers)
        for frame in frames:
            if frame.usage_only and not usage_wanted:
                continue
            if delay_s and frame.content:
                await self._sleep(request, delay_s)
            await self._write(request, resp, frame.data)
            if frame.content:
                content_sent += 1
                if hold is not None and content_sent == hold[1]:
                    await self._until(request, hold[0])
        await resp.write_eof()
        return resp

    async def _prepare(
        self, request: web.Request, headers: Mapping[str, str]
    ) -> web.StreamResponse:
        self._check(request)
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **headers}
        )
        try:
            await resp.prepare(request)
        except ConnectionError as exc:
            raise _ClientGone from exc
        return resp

    async def _write(self, request: web.Request, resp: web.StreamResponse, data: bytes) -> None:
        self._check(request)
        try:
            await resp.write(data)
        except ConnectionError as exc:
            raise _ClientGone from exc

    async def _sleep(self, request: web.Request, seconds: float) -> None:
        """Sleep, noticing within ~50 ms if the client leaves (or the server stops).

        (A shorter look is costly: 300 requests held at once, looking every 10 ms, took
        over half a core, which a test running beside others on a busy machine lacks.)
        """
        deadline = time.monotonic() + seconds
        while not self._stopping:
            self._check(request)
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(0.05, left))

    async def _until(self, request: web.Request, event: threading.Event) -> None:
        """Wait for a test's `event`, noticing within ~10 ms if the client leaves."""
        while not (event.is_set() or self._stopping):
            self._check(request)
            await asyncio.sleep(0.01)

    @staticmethod
    def _check(request: web.Request) -> None:
        transport = request.transport
        if transport is None or transport.is_closing():
            raise _ClientGone

    def _gone(self, recorded: RecordedRequest) -> web.StreamResponse:
        with self._lock:
            if not any(r is recorded for r in self.disconnects):
                self.disconnects.append(recorded)
        return web.Response(status=499)


def _status(b: Status) -> web.Response:
    if b.body is None:
        body: Mapping[str, Any] | str = {
            "error": {"message": f"fake status {b.status}", "type": "fake_error"}
        }
    else:
        body = b.body
    if isinstance(body, str):
        return web.Response(status=b.status, text=body, headers=b.headers)
    return web.json_response(dict(body), status=b.status, headers=b.headers)
