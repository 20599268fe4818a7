"""SIGTERM past server.shutdown_grace_s: every open request still gets an OpenAI-shaped
answer, and every request its ledger rows, before `olp start` exits."""

from __future__ import annotations

import signal
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import orjson

from fakes.upstream import FakeUpstream, Hang, Text
from olp_server import OWNER_TOKEN, ProcessServer, write_config

N = 6  # streaming requests, and as many non-streaming ones


def _ask(
    server: ProcessServer,
    n: int,
    stream: bool,
    answers: list[tuple[bool, httpx.Response, str]],
    content: threading.Semaphore,
) -> None:
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json={"model": "m", "stream": stream, "messages": [{"role": "user", "content": f"x{n}"}]},
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        timeout=30,
    ) as resp:
        lines = []
        for line in resp.iter_lines():
            if not lines and line.startswith("data: {"):
                content.release()  # this stream's first content arrived
            lines.append(line)
    answers.append((stream, resp, "\n".join(lines)))


def _start(
    server: ProcessServer,
    n: int,
    stream: bool,
    answers: list[tuple[bool, httpx.Response, str]],
    content: threading.Semaphore,
) -> threading.Thread:
    client = threading.Thread(target=_ask, args=(server, n, stream, answers, content))
    client.start()
    return client


def _check_streamed(resp: httpx.Response, body: str) -> None:
    # The status line went out with the first chunk: the stream ends with a finish_reason
    # (the answer is cut short), then the error that says why.
    assert resp.status_code == 200
    frames = [
        line.removeprefix("data: ") for line in body.splitlines() if line.startswith("data: ")
    ]
    chunks = [orjson.loads(f) for f in frames[:-1]]
    assert chunks and chunks[0]["choices"][0]["delta"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    error = orjson.loads(frames[-1])["error"]
    assert error["code"] == "server_shutting_down" and error["type"] == "server_error"


def _check_complete(resp: httpx.Response, body: str) -> None:
    assert resp.status_code == 503, body
    assert resp.headers["retry-after"] == "5"
    error = orjson.loads(body)["error"]
    assert error["code"] == "server_shutting_down"
    assert "shutting down" in error["message"]


def _rows(home: Path, sql: str) -> list[Any]:
    with sqlite3.connect(home / "ledger.db") as conn:
        return conn.execute(sql).fetchall()


def test_requests_cut_by_shutdown_are_answered_and_recorded(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    home = tmp_path / "home"
    write_config(
        home,
        {
            "server": {"shutdown_grace_s": 1},
            "providers": {
                "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
            },
        },
    )
    answers: list[tuple[bool, httpx.Response, str]] = []
    with ProcessServer(home, {"OLP_LOG_LEVEL": "info"}) as server:
        # The streams send a word every 0.3 s for 15 s, far past the grace; the others
        # wait for a first byte that never comes.
        content = threading.Semaphore(0)
        upstream.script(*[Text("word " * 50, chunks=50, delay_s=0.3)] * N)
        clients = [_start(server, n, True, answers, content) for n in range(N)]
        for _ in range(N):
            assert content.acquire(timeout=15)
        upstream.script(*[Hang(60)] * N)
        clients += [_start(server, n, False, answers, content) for n in range(N, 2 * N)]
        assert upstream.wait_for(lambda: upstream.calls == 2 * N, timeout=15)
        server.terminate(signal.SIGTERM)
        for client in clients:
            client.join(30)
        assert server.proc is not None
        assert server.proc.wait(timeout=30) in (0, -signal.SIGTERM)
        assert server.proc.stderr is not None
        log = server.proc.stderr.read()
    assert len(answers) == 2 * N
    for stream, resp, body in answers:
        (_check_streamed if stream else _check_complete)(resp, body)
    assert "Traceback" not in log and "CancelledError" not in log
    assert log.count("request_cut_by_shutdown") == 2 * N
    requests = _rows(home, "SELECT request_id, status, error_code, stream FROM ledger_requests")
    assert len(requests) == 2 * N
    assert sorted((status, stream) for _, status, _, stream in requests) == sorted(
        [(200, 1)] * N + [(503, 0)] * N
    )
    assert {code for _, _, code, _ in requests} == {"server_shutting_down"}
    attempts = _rows(home, "SELECT request_id, outcome FROM ledger_attempts")
    assert sorted(request_id for request_id, _ in attempts) == sorted(r[0] for r in requests)
    assert {outcome for _, outcome in attempts} == {"cancelled"}
