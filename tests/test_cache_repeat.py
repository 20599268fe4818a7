"""A request repeated byte for byte is answered from the cache, the same way each time.

The third and later identical requests (the first misses, the second is the first hit)
must look exactly like the second, and anything that would change the chain's answer —
the key's settings, the entry's life, a Cache-Control header — must be seen.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import openai

from cache_server import AUTH, FakeClock, ask, config, member_key
from olp.accounts import KeyLimits
from olp.accounts.keystore import KeyStore, keys_db_path

from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, olp_server

# Headers that differ between any two responses, hit or not.
PER_REQUEST = {"x-olp-request-id", "x-request-id", "x-olp-latency-ms", "content-length", "date"}


def stable_headers(resp: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in resp.headers.items() if k not in PER_REQUEST}


def test_repeats_look_exactly_like_the_first_hit(tmp_path: Path, upstream: FakeUpstream) -> None:
    upstream.script(Text("four", chunks=2))
    cfg = config(upstream, pricing={"m": {"input": 1000, "output": 1000}})
    with olp_server(tmp_path, cfg) as server:
        miss, hit, *repeats = (ask(server) for _ in range(4))
        stats = httpx.get(f"{server.base_url}/cache/stats", headers=AUTH).json()
        hops = httpx.get(f"{server.base_url}/metrics", headers=AUTH).text
    assert miss.headers["x-olp-cache"] == "miss"
    assert upstream.calls == 1
    for again in repeats:
        assert stable_headers(again) == stable_headers(hit)
        body, first = again.json(), hit.json()
        assert body["id"] != first["id"]  # a response of its own ...
        assert body["id"] == "chatcmpl-" + again.headers["x-olp-request-id"].removeprefix("req_")
        for field in ("object", "model", "choices", "usage"):  # ... with the same answer
            assert body[field] == first[field]
    assert stats["hits"] == 3 and stats["misses"] == 1
    # The engine's hop counter sees every replay, as it does a hit through the chain.
    assert 'olp_hop_attempts_total{provider="up",outcome="served",code=""} 4' in hops

    conn = sqlite3.connect(tmp_path / "olp-home" / "ledger.db")
    rows = conn.execute(
        "SELECT cache, provider, model, hops, status, cost_usd, api_cost_usd, cost_source,"
        " prompt_tokens, completion_tokens FROM ledger_requests ORDER BY id"
    ).fetchall()
    attempts = conn.execute("SELECT COUNT(*) FROM ledger_attempts").fetchone()[0]
    conn.close()
    assert rows[0][0] == "miss"
    assert rows[1][0] == "hit" and rows[1][5] == 0.0
    assert rows[2] == rows[1] and rows[3] == rows[1]
    assert attempts == 1  # replays tried no provider


def test_streamed_repeats_are_valid_sse_streams(tmp_path: Path, upstream: FakeUpstream) -> None:
    upstream.script(Text("one two three", chunks=3))
    with olp_server(tmp_path, config(upstream)) as server:
        sdk = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=OWNER_TOKEN, max_retries=0)
        texts, ids = [], set()
        for _ in range(4):
            chunks = list(
                sdk.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": "What is 2+2?"}],
                    stream=True,
                    temperature=0,
                )
            )
            texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
            ids |= {c.id for c in chunks}
    assert texts == ["one two three"] * 4
    assert len(ids) == 4  # every response has its own id
    assert upstream.calls == 1


def test_a_key_changed_meanwhile_is_checked_again(tmp_path: Path, upstream: FakeUpstream) -> None:
    home = tmp_path / "olp-home"
    _, alice = member_key(home, "alice")
    with olp_server(tmp_path, config(upstream)) as server:
        for _ in range(3):
            assert ask(server, key=alice).headers["x-olp-cache"] in ("miss", "hit")
        store = KeyStore.open(keys_db_path(home))  # another connection, as `olp keys set`
        try:
            store.update("alice", allowed_models=["other-*"])
            refused = ask(server, key=alice)
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "model_not_allowed"
            store.update("alice", allowed_models=None, rpm=4)
            assert ask(server, key=alice).status_code == 200
            limited = ask(server, key=alice)  # the limit counts the repeats before it too
            assert limited.status_code == 429
            assert limited.json()["error"]["code"] == "key_limit_exceeded"
            store.revoke("alice")
            assert ask(server, key=alice).status_code == 401
        finally:
            store.close()
    assert upstream.calls == 1


def test_an_answer_the_cache_dropped_is_not_replayed(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    clock = FakeClock()
    with olp_server(tmp_path, config(upstream, cache={"ttl_s": 60}), clock=clock) as server:
        for _ in range(3):
            ask(server)
        clock.now += 61
        assert ask(server).headers["x-olp-cache"] == "miss"  # expired
        assert upstream.calls == 2
        ask(server)
        assert ask(server).headers["x-olp-cache"] == "hit"
        cleared = httpx.delete(f"{server.base_url}/cache", headers=AUTH)
        assert cleared.status_code == 200
        assert ask(server).headers["x-olp-cache"] == "miss"  # cleared
        assert upstream.calls == 3


def test_cache_control_on_a_repeat_is_obeyed(tmp_path: Path, upstream: FakeUpstream) -> None:
    with olp_server(tmp_path, config(upstream)) as server:
        for _ in range(3):
            ask(server)
        assert ask(server, headers={"cache-control": "no-cache"}).headers["x-olp-cache"] == (
            "bypass"
        )
        assert ask(server, headers={"cache-control": "no-store"}).headers["x-olp-cache"] == (
            "bypass"
        )
        assert upstream.calls == 3
        assert ask(server).headers["x-olp-cache"] == "hit"


def test_the_same_body_from_two_keys_stays_in_two_namespaces(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    home = tmp_path / "olp-home"
    _, alice = member_key(home, "alice")
    _, bob = member_key(home, "bob")
    with olp_server(tmp_path, config(upstream)) as server:
        for _ in range(3):
            ask(server, key=alice)
        assert ask(server, key=bob).headers["x-olp-cache"] == "miss"
        assert [ask(server, key=k).headers["x-olp-cache"] for k in (alice, bob, alice)] == [
            "hit",
            "hit",
            "hit",
        ]
    assert upstream.calls == 2


def test_limits_apply_to_repeats(tmp_path: Path, upstream: FakeUpstream) -> None:
    home = tmp_path / "olp-home"
    store = KeyStore.open(keys_db_path(home))
    try:
        carol = store.create("carol", tier="member", limits=KeyLimits(rpd=3)).secret
    finally:
        store.close()
    with olp_server(tmp_path, config(upstream)) as server:
        assert [ask(server, key=carol).status_code for _ in range(4)] == [200, 200, 200, 429]
