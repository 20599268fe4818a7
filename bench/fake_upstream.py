"""A fast upstream: fixed answers, encoded once at start, in OpenAI's Chat Completions
format and in Anthropic's Messages format (for the claude CLI, `bench.cli_warm`).

Its cost per request is part of every measurement (it shares the cores with the proxy), so
a request does only what is unavoidable: read the body and parse it to learn `stream`.

    python -m bench.fake_upstream --port 9100 [--chunks 8] [--delay-ms 20]

`--delay-ms` makes every Chat Completions answer wait that long before its first byte, like a model
thinking: with it, the benchmark shows what a proxy's costs mean against a real upstream.

A Messages answer is always text, also to a request that offers tools; `GET /bench/tools`
gives (and forgets) the names of the tools Messages requests offered since it was last
asked, so `bench.cli_tools` can check that a request with client tools reached the
upstream carrying them.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass

import orjson
from aiohttp import web

from bench._serve import serve

_ID = "chatcmpl-bench"
_CREATED = 1_700_000_000
_MODEL = "bench-model"
_WORDS = ("Hello", "!", " How", " can", " I", " help", " you", " today", "?")
_USAGE = {"prompt_tokens": 9, "completion_tokens": 8, "total_tokens": 17}
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


@dataclass(frozen=True, slots=True)
class Answers:
    """Every response body the server can send, already encoded."""

    completion: bytes
    stream: tuple[bytes, ...]
    stream_with_usage: tuple[bytes, ...]
    models: bytes
    message: bytes  # Anthropic Messages, whole
    message_stream: tuple[bytes, ...]  # Anthropic Messages, streamed


def _chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {
        "id": _ID,
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": _MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _event(payload: object) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def build_answers(chunks: int) -> Answers:
    words = [_WORDS[i % len(_WORDS)] for i in range(chunks)]
    completion = {
        "id": _ID,
        "object": "chat.completion",
        "created": _CREATED,
        "model": _MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(words)},
                "finish_reason": "stop",
            }
        ],
        "usage": _USAGE,
    }
    # Role first and without "content", as OpenAI does; the load generator times the first
    # frame that carries text, so the role chunk must not look like one.
    events = [_event(_chunk({"role": "assistant"}))]
    events += [_event(_chunk({"content": w})) for w in words]
    events.append(_event(_chunk({}, finish="stop")))
    usage = {**_chunk({}), "choices": [], "usage": _USAGE}
    done = b"data: [DONE]\n\n"
    models = {"object": "list", "data": [{"id": _MODEL, "object": "model", "owned_by": "bench"}]}
    message, message_stream = _anthropic(words)
    return Answers(
        completion=orjson.dumps(completion),
        stream=(*events, done),
        stream_with_usage=(*events, _event(usage), done),
        models=orjson.dumps(models),
        message=message,
        message_stream=message_stream,
    )


def _named(name: str, payload: object) -> bytes:
    return b"event: " + name.encode() + b"\n" + _event(payload)


def _anthropic(words: list[str]) -> tuple[bytes, tuple[bytes, ...]]:
    usage = {"input_tokens": 9, "output_tokens": len(words)}
    message = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": _MODEL,
        "content": [{"type": "text", "text": "".join(words)}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events = [
        _named("message_start", {"type": "message_start", "message": start}),
        _named(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for word in words:
        delta = {"type": "text_delta", "text": word}
        events.append(
            _named(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        )
    events += [
        _named("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _named(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": len(words)},
            },
        ),
        _named("message_stop", {"type": "message_stop"}),
    ]
    return orjson.dumps(message), tuple(events)


def create_app(answers: Answers, delay_ms: float = 0.0) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return web.json_response({"error": {"message": "bad JSON"}}, status=400)
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        if not isinstance(body, dict) or body.get("stream") is not True:
            return web.Response(body=answers.completion, content_type="application/json")
        options = body.get("stream_options")
        with_usage = isinstance(options, dict) and options.get("include_usage") is True
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        await resp.prepare(request)
        # One write per event, like a real upstream, so the proxy sees separate chunks.
        for event in answers.stream_with_usage if with_usage else answers.stream:
            await resp.write(event)
        await resp.write_eof()
        return resp

    tools_offered: set[str] = set()

    async def messages(request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return web.json_response({"error": {"message": "bad JSON"}}, status=400)
        if isinstance(body, dict):
            tools_offered.update(str(tool.get("name")) for tool in body.get("tools") or ())
        if not isinstance(body, dict) or body.get("stream") is not True:
            return web.Response(body=answers.message, content_type="application/json")
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        await resp.prepare(request)
        for event in answers.message_stream:
            await resp.write(event)
        await resp.write_eof()
        return resp

    async def models(_: web.Request) -> web.Response:
        return web.Response(body=answers.models, content_type="application/json")

    async def tools(_: web.Request) -> web.Response:
        names = sorted(tools_offered)
        tools_offered.clear()
        return web.json_response(names)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/messages", messages)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/bench/tools", tools)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fake_upstream", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--chunks", type=int, default=8, help="content chunks per stream")
    parser.add_argument(
        "--delay-ms", type=float, default=0.0, help="wait before each chat answer's first byte"
    )
    args = parser.parse_args()
    app = create_app(build_answers(args.chunks), args.delay_ms)
    serve(app, args.host, args.port, "fake_upstream")


if __name__ == "__main__":
    main()
