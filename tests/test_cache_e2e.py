"""The response cache through a real OLP: hits, singleflight, namespaces, bypass, surfaces."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from cache_server import AUTH, QUESTION, FakeClock, ask, client, config, member_key

from fakes.upstream import DieMidStream, FakeUpstream, Slow, Status, Text
from olp_server import OWNER_TOKEN, ThreadServer, eventually, olp_server, sse_text


@pytest.fixture
def olp(tmp_path: Path, upstream: FakeUpstream) -> Iterator[ThreadServer]:
    with olp_server(tmp_path, config(upstream)) as server:
        yield server


def test_second_request_is_a_hit_without_upstream_call(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    upstream.script(Text("four", chunks=1))
    first = client(olp).chat.completions.with_raw_response.create(model="m", messages=QUESTION)
    second = client(olp).chat.completions.with_raw_response.create(model="m", messages=QUESTION)
    assert first.headers["x-olp-cache"] == "miss"
    assert second.headers["x-olp-cache"] == "hit"
    assert second.parse().choices[0].message.content == "four"
    assert second.headers["x-olp-provider-used"] == "up"
    assert upstream.calls == 1


def test_streamed_hit_replays_a_valid_sse_stream(olp: ThreadServer, upstream: FakeUpstream) -> None:
    upstream.script(Text("one two three", chunks=3))
    live = list(client(olp).chat.completions.create(model="m", messages=QUESTION, stream=True))
    raw = client(olp).chat.completions.with_raw_response.create(
        model="m", messages=QUESTION, stream=True, stream_options={"include_usage": True}
    )
    replayed = list(raw.parse())
    assert raw.headers["x-olp-cache"] == "hit"

    def text(chunks: list[Any]) -> list[str]:
        return [
            c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
        ]

    assert len(text(live)) == 3
    assert text(replayed) == text(live)  # the same chunk boundaries
    assert "".join(text(replayed)) == "one two three"
    assert replayed[-1].usage is not None
    assert upstream.calls == 1
    # A streamed miss fills the cache for a non-streaming hit too.
    done = client(olp).chat.completions.create(model="m", messages=QUESTION)
    assert done.choices[0].message.content == "one two three"
    assert upstream.calls == 1


@pytest.mark.parametrize("stream", [False, True])
def test_fifty_concurrent_identical_requests_make_one_upstream_call(
    olp: ThreadServer, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(Slow(first_byte_delay_s=0.3, chunk_delay_s=0.05))
    with ThreadPoolExecutor(50) as pool:
        replies = list(pool.map(lambda _: ask(olp, stream=stream), range(50)))
    assert all(r.status_code == 200 for r in replies)
    texts = {
        sse_text(r.text) if stream else r.json()["choices"][0]["message"]["content"]
        for r in replies
    }
    assert len(texts) == 1 and texts != {""}
    assert upstream.calls == 1


def test_follower_joining_mid_stream_gets_the_whole_answer(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    release = threading.Event()  # the upstream holds after the first word until then
    upstream.script(Text("a b c d e f", chunks=6, delay_s=0.05, hold=release))
    first: list[str] = []
    mid_stream = threading.Event()

    def lead() -> None:
        body = {"model": "m", "stream": True, "temperature": 0, "messages": QUESTION}
        url = f"{olp.base_url}/v1/chat/completions"
        with httpx.stream("POST", url, json=body, headers=AUTH, timeout=20) as reply:
            lines = []
            for line in reply.iter_lines():
                lines.append(line)
                if sse_text(line):  # the first word has reached the client
                    mid_stream.set()
            first.append("\n".join(lines))

    leader = threading.Thread(target=lead)
    result: list[httpx.Response] = []
    follower = threading.Thread(target=lambda: result.append(ask(olp, stream=True)))
    leader.start()
    try:
        assert mid_stream.wait(10)
        follower.start()
        assert eventually(lambda: cache_stats(olp)["shared"] == 1)  # it joined the flight
    finally:
        release.set()
    leader.join()
    follower.join()
    assert sse_text(result[0].text) == sse_text(first[0]) == "a b c d e f"
    assert upstream.calls == 1


def cache_stats(server: ThreadServer) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(f"{server.base_url}/cache/stats", headers=AUTH).json()
    return stats


def raw_stream_request(server: ThreadServer) -> socket.socket:
    """A streaming request on a bare socket, so the test can drop the connection."""
    body = json.dumps(
        {"model": "m", "stream": True, "temperature": 0, "messages": QUESTION}
    ).encode()
    raw = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer "
        f"{OWNER_TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}"
        "\r\n\r\n"
    ).encode() + body
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(raw)
    return sock


def test_leader_disconnecting_does_not_cut_a_follower(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    release = threading.Event()  # the upstream holds after the first word until then
    upstream.script(Text("a b c d e f", chunks=6, delay_s=0.2, hold=release))
    result: list[httpx.Response] = []
    follower = threading.Thread(target=lambda: result.append(ask(olp, stream=True)))
    sock = raw_stream_request(olp)
    try:
        assert b"200 OK" in sock.recv(65536)
        follower.start()
        assert eventually(lambda: cache_stats(olp)["shared"] == 1)  # it joined the flight
    finally:
        sock.close()  # the leader's client goes away
        release.set()  # the rest of the answer takes a second: time to see it gone
    follower.join()
    assert sse_text(result[0].text) == "a b c d e f"
    assert upstream.calls == 1
    assert upstream.disconnects == []  # the upstream call lived on for the follower


def test_leader_disconnecting_before_the_first_byte_does_not_cut_a_follower(
    olp: ThreadServer, upstream: FakeUpstream
) -> None:
    # The leader is still waiting for the upstream's first byte, which it pulls in its own
    # task (nobody followed it yet), when the follower joins and then its client goes away.
    release = threading.Event()  # the upstream sends nothing until then
    upstream.script(Text(chunks=3, delay_s=0.05, hold=release, hold_at=0))
    result: list[httpx.Response] = []
    follower = threading.Thread(target=lambda: result.append(ask(olp, stream=True)))
    sock = raw_stream_request(olp)
    try:
        assert eventually(lambda: upstream.calls == 1)
        follower.start()
        assert eventually(lambda: cache_stats(olp)["shared"] == 1)
    finally:
        sock.close()
        time.sleep(0.3)  # nothing to wait for: the server's chance to see the leader go
        release.set()
    follower.join()
    assert result[0].status_code == 200
    assert sse_text(result[0].text) != ""
    assert upstream.calls == 1
    assert upstream.disconnects == []


def test_a_key_never_sees_another_keys_entries(tmp_path: Path, upstream: FakeUpstream) -> None:
    home = tmp_path / "olp-home"
    _, alice = member_key(home, "alice")
    bob_id, bob = member_key(home, "bob")
    with olp_server(tmp_path, config(upstream)) as server:
        assert ask(server, key=alice).headers["x-olp-cache"] == "miss"
        assert ask(server, key=alice).headers["x-olp-cache"] == "hit"
        assert ask(server, key=bob).headers["x-olp-cache"] == "miss"
        assert upstream.calls == 2
        own = httpx.get(
            f"{server.base_url}/cache/stats", headers={"authorization": f"Bearer {bob}"}
        ).json()
        assert own["namespace"] == bob_id
        assert own["hits"] == 0 and own["misses"] == 1 and own["entries"] == 1
        everything = httpx.get(f"{server.base_url}/cache/stats", headers=AUTH).json()
        assert everything["hits"] == 1 and everything["entries"] == 2
        assert set(everything["namespaces"]) >= {bob_id}


def test_bypass_headers(olp: ThreadServer, upstream: FakeUpstream) -> None:
    assert ask(olp, headers={"cache-control": "no-store"}).headers["x-olp-cache"] == "bypass"
    assert ask(olp).headers["x-olp-cache"] == "miss"  # no-store wrote nothing
    fresh = ask(olp, headers={"cache-control": "no-cache"})
    assert fresh.headers["x-olp-cache"] == "bypass"  # skipped the lookup ...
    assert upstream.calls == 3
    assert ask(olp).headers["x-olp-cache"] == "hit"  # ... but stored the answer
    assert upstream.calls == 3


def test_truncated_answers_are_not_cached(olp: ThreadServer, upstream: FakeUpstream) -> None:
    upstream.script(DieMidStream(after_chunks=2))
    cut = ask(olp, stream=True)
    assert '"finish_reason":"length"' in cut.text
    again = ask(olp, stream=True)
    assert again.headers["x-olp-cache"] == "miss"
    assert upstream.calls == 2


def test_errors_are_not_cached(olp: ThreadServer, upstream: FakeUpstream) -> None:
    upstream.script(Status(400, {"error": {"message": "bad"}}))
    assert ask(olp).status_code == 400
    assert ask(olp).status_code == 200
    assert upstream.calls == 2


def test_ttl_expiry_with_an_injectable_clock(tmp_path: Path, upstream: FakeUpstream) -> None:
    clock = FakeClock()
    with olp_server(tmp_path, config(upstream, cache={"ttl_s": 60}), clock=clock) as server:
        ask(server)
        clock.now += 59
        assert ask(server).headers["x-olp-cache"] == "hit"
        clock.now += 2
        assert ask(server).headers["x-olp-cache"] == "miss"
    assert upstream.calls == 2


def test_entries_survive_a_restart(tmp_path: Path, upstream: FakeUpstream) -> None:
    with olp_server(tmp_path, config(upstream)) as server:
        ask(server)
    with olp_server(tmp_path, config(upstream)) as server:
        assert ask(server).headers["x-olp-cache"] == "hit"
    assert upstream.calls == 1


def test_a_corrupted_cache_file_does_not_stop_olp(tmp_path: Path, upstream: FakeUpstream) -> None:
    home = tmp_path / "olp-home"
    home.mkdir()
    (home / "cache.db").write_bytes(b"this is not a database" * 100)
    with olp_server(tmp_path, config(upstream)) as server:
        assert ask(server).status_code == 200
        assert ask(server).headers["x-olp-cache"] == "hit"
    assert any(p.name.startswith("cache.db.corrupt-") for p in home.iterdir())


def test_a_cooling_primary_does_not_hide_the_next_hops_cached_answer(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    with FakeUpstream() as primary:
        cfg = {
            "providers": {
                "primary": {"type": "openai-http", "base_url": primary.openai_base_url},
                "backup": {"type": "openai-http", "base_url": upstream.openai_base_url},
            },
            "routing": {
                "chains": {
                    "m": [
                        {"provider": "primary", "model": "p"},
                        {"provider": "backup", "model": "b"},
                    ]
                }
            },
        }
        primary.script(Status(429, {"error": {"message": "slow"}}, {"retry-after": "600"}))
        with olp_server(tmp_path, cfg) as server:
            assert ask(server).headers["x-olp-provider-used"] == "backup"
            again = ask(server)
            assert again.headers["x-olp-cache"] == "hit"
            assert again.headers["x-olp-provider-used"] == "backup"
        assert primary.calls == 1 and upstream.calls == 1


def test_anthropic_cache_control_markers_bypass_anthropic_hops(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    cfg = {
        "providers": {
            "claude": {"type": "anthropic-http", "base_url": upstream.base_url, "models": ["m"]}
        }
    }
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "long context", "cache_control": {"type": "ephemeral"}}
                ],
            }
        ],
    }
    with olp_server(tmp_path, cfg) as server:
        url = f"{server.base_url}/v1/chat/completions"
        for _ in range(2):
            resp = httpx.post(url, json=body, headers=AUTH)
            assert resp.headers["x-olp-cache"] == "bypass"
    assert upstream.calls == 2


def test_clear_over_http_and_from_the_cli(tmp_path: Path, upstream: FakeUpstream) -> None:
    home = tmp_path / "olp-home"
    member_id, member = member_key(home, "kid")
    with olp_server(tmp_path, config(upstream)) as server:
        ask(server)
        ask(server, key=member)
        forbidden = httpx.delete(
            f"{server.base_url}/cache", headers={"authorization": f"Bearer {member}"}
        )
        assert forbidden.status_code == 403
        one = httpx.delete(
            f"{server.base_url}/cache", params={"namespace": member_id}, headers=AUTH
        )
        assert one.json() == {"cleared": 1, "namespace": member_id}
        assert ask(server, key=member).headers["x-olp-cache"] == "miss"
        assert ask(server).headers["x-olp-cache"] == "hit"
        proc = subprocess.run(
            [sys.executable, "-m", "olp", "cache", "clear", "--yes"],
            env={**os.environ, "OLP_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        deadline = time.monotonic() + 5
        while ask(server).headers["x-olp-cache"] == "hit":
            assert time.monotonic() < deadline, "the server did not follow `olp cache clear`"
            time.sleep(0.2)


def olp_cache_clear(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "olp", "cache", "clear", "--yes", *args],
        env={**os.environ, "OLP_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_cli_clear_takes_a_key_name_and_refuses_an_unknown_one(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    home = tmp_path / "olp-home"
    kid_id, kid = member_key(home, "kid")
    _, mum = member_key(home, "mum")
    with olp_server(tmp_path, config(upstream)) as server:
        for key in (OWNER_TOKEN, kid, mum):
            assert ask(server, key=key).headers["x-olp-cache"] == "miss"

        unknown = olp_cache_clear(home, "--key", "nobody")
        assert unknown.returncode == 2
        assert "--key nobody: no key has this id or name" in unknown.stderr
        assert "olp keys list" in unknown.stderr
        assert "Traceback" not in unknown.stderr

        by_name = olp_cache_clear(home, "--key", "kid")
        assert by_name.returncode == 0, by_name.stderr
        assert f"cleared 1 stored answer(s) from namespace {kid_id} (key kid)" in by_name.stdout

        owner = olp_cache_clear(home, "--key", "owner")
        assert owner.returncode == 0, owner.stderr
        assert "cleared 1 stored answer(s) from namespace owner" in owner.stdout

        deadline = time.monotonic() + 5
        while ask(server, key=kid).headers["x-olp-cache"] == "hit":
            assert time.monotonic() < deadline, "the server did not follow the clear"
            time.sleep(0.2)
        assert ask(server, key=mum).headers["x-olp-cache"] == "hit"  # not asked: kept


def test_a_hit_is_a_hit_in_the_ledger_with_zero_cost(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    cfg = config(upstream, pricing={"m": {"input": 1000, "output": 1000}})
    with olp_server(tmp_path, cfg) as server:
        ask(server)
        ask(server)
    conn = sqlite3.connect(tmp_path / "olp-home" / "ledger.db")
    rows = conn.execute(
        "SELECT request_id, cache, cost_usd, provider FROM ledger_requests ORDER BY ts"
    ).fetchall()
    attempts = conn.execute("SELECT request_id, outcome FROM ledger_attempts").fetchall()
    conn.close()
    (miss_id, *miss), (_, *hit) = rows
    assert miss[0] == "miss" and miss[1] > 0
    assert hit == ["hit", 0.0, "up"]  # the hop whose stored answer was replayed
    # One attempt row per hop tried at a provider: the miss asked one, the replay none.
    assert attempts == [(miss_id, "served")]
