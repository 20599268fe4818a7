"""Regenerate means regenerate: only deterministic requests are answered from the cache,
unless the owner (`cache.serve_nondeterministic`) or the request (`X-OLP-Cache: allow`)
opts in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from cache_server import config

from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, ThreadServer, olp_server


def chat(server: ThreadServer, headers: dict[str, str] | None = None, **fields: Any) -> str:
    """The request's X-OLP-Cache, after checking it was answered."""
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {OWNER_TOKEN}", **(headers or {})},
        json={"model": "m", "messages": [{"role": "user", "content": "a poem"}], **fields},
        timeout=20,
    )
    assert resp.status_code == 200, resp.text
    return resp.headers["x-olp-cache"]


def test_a_sampled_request_reaches_the_upstream_every_time(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    upstream.script(Text("roses"))
    with olp_server(tmp_path, config(upstream)) as server:
        for fields in ({"temperature": 1}, {}):
            assert [chat(server, **fields) for _ in range(3)] == ["bypass"] * 3
    assert upstream.calls == 6


def test_deterministic_requests_are_hits(tmp_path: Path, upstream: FakeUpstream) -> None:
    upstream.script(Text("roses"))
    with olp_server(tmp_path, config(upstream)) as server:
        assert [chat(server, temperature=0) for _ in range(3)] == ["miss", "hit", "hit"]
        assert [chat(server, seed=7, temperature=1) for _ in range(2)] == ["miss", "hit"]
    assert upstream.calls == 2


def test_a_request_opts_in_with_a_header(tmp_path: Path, upstream: FakeUpstream) -> None:
    upstream.script(Text("roses"))
    allow = {"x-olp-cache": "allow"}
    with olp_server(tmp_path, config(upstream)) as server:
        # The sampled answer was stored, though not served: an opted-in request may use it.
        assert chat(server, temperature=1) == "bypass"
        assert chat(server, allow, temperature=1) == "hit"
        assert chat(server, temperature=1) == "bypass"  # the next one without it regenerates
        assert chat(server, allow, temperature=1) == "hit"
    assert upstream.calls == 2


def test_the_owner_opts_every_request_in(tmp_path: Path, upstream: FakeUpstream) -> None:
    upstream.script(Text("roses"))
    cfg = config(upstream, cache={"serve_nondeterministic": True})
    with olp_server(tmp_path, cfg) as server:
        assert [chat(server, temperature=1) for _ in range(2)] == ["miss", "hit"]
    assert upstream.calls == 1


def test_a_bad_opt_in_header_is_named(tmp_path: Path, upstream: FakeUpstream) -> None:
    with olp_server(tmp_path, config(upstream)) as server:
        resp = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            headers={"authorization": f"Bearer {OWNER_TOKEN}", "x-olp-cache": "please"},
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
    assert resp.status_code == 400
    assert "X-OLP-Cache" in resp.json()["error"]["message"]
    assert upstream.calls == 0
