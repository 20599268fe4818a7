"""`olp cache stats` (the real executable) after a real server stored answers and recorded
what the cache did for each request in the ledger.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson

from olp.accounts import KeyLimits
from olp.accounts.keystore import KeyStore, keys_db_path

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ThreadServer, olp_server


def olp_cache(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "olp", "cache", *args],
        env={**os.environ, "OLP_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def ask(server: ThreadServer, key: str, content: str, **headers: str) -> str:
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        timeout=20,
        headers={"authorization": f"Bearer {key}", **headers},
        json={"model": "m", "temperature": 0, "messages": [{"role": "user", "content": content}]},
    )
    assert resp.status_code == 200, resp.text
    return resp.headers["x-olp-cache"]


def serve_some(tmp_path: Path, upstream: FakeUpstream) -> tuple[Path, str]:
    """Owner: 2 misses, 3 hits, 1 bypass; member: 1 miss; plus one refused request."""
    home = tmp_path / "olp-home"
    store = KeyStore.open(keys_db_path(home))
    try:
        member = store.create("kid", tier="member", limits=KeyLimits(rpm=1))
    finally:
        store.close()
    cfg: dict[str, Any] = {
        "providers": {
            "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
        }
    }
    with olp_server(tmp_path, cfg) as server:
        outcomes = [
            ask(server, OWNER_TOKEN, "one"),
            ask(server, OWNER_TOKEN, "one"),
            ask(server, OWNER_TOKEN, "two"),
            ask(server, OWNER_TOKEN, "two"),
            ask(server, OWNER_TOKEN, "two"),
            ask(server, OWNER_TOKEN, "three", **{"cache-control": "no-store"}),
            ask(server, member.secret, "one"),
        ]
        assert outcomes == ["miss", "hit", "miss", "hit", "hit", "bypass", "miss"]
        refused = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            headers={"authorization": f"Bearer {member.secret}"},
            json={"model": "m", "temperature": 0, "messages": [{"role": "user", "content": "one"}]},
        )
        assert refused.status_code == 429  # over its rpm: the cache never saw it
    return home, member.record.id


def test_stats_show_stored_answers_and_each_keys_hit_rate(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    home, member_id = serve_some(tmp_path, upstream)

    proc = olp_cache(home, "stats", "--json")

    assert proc.returncode == 0, proc.stderr
    figures = orjson.loads(proc.stdout)
    assert set(figures["namespaces"]) == {"owner", member_id}  # the owner token's namespace
    owner = figures["namespaces"]["owner"]
    assert owner["bytes"] > 0
    assert {k: v for k, v in owner.items() if k != "bytes"} == {
        "name": "owner",
        "entries": 2,
        "hits": 3,
        "misses": 2,
        "bypasses": 1,
        "hit_rate": 0.6,
    }
    member = figures["namespaces"][member_id]
    assert (member["name"], member["entries"], member["hits"], member["misses"]) == (
        "kid",
        1,
        0,
        1,
    )
    assert member["bypasses"] == 0  # the refused request is not counted
    assert (figures["entries"], figures["hits"], figures["misses"]) == (3, 3, 3)
    assert figures["hit_rate"] == 0.5
    assert figures["bytes"] == sum(ns["bytes"] for ns in figures["namespaces"].values()) > 0

    table = olp_cache(home, "stats")
    assert table.returncode == 0, table.stderr
    assert any(line.startswith(member_id) and "kid" in line for line in table.stdout.splitlines())
    assert "60%" in table.stdout and "50%" in table.stdout


def test_stats_since_a_later_time_count_no_requests(tmp_path: Path, upstream: FakeUpstream) -> None:
    home, _ = serve_some(tmp_path, upstream)

    proc = olp_cache(home, "stats", "--since", "2999-01-01", "--json")

    assert proc.returncode == 0, proc.stderr
    figures = orjson.loads(proc.stdout)
    assert (figures["entries"], figures["hits"], figures["misses"]) == (3, 0, 0)
    assert figures["hit_rate"] is None


def test_stats_on_a_fresh_home_and_bad_input(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    home.mkdir()

    fresh = olp_cache(home, "stats", "--json")
    assert fresh.returncode == 0, fresh.stderr
    assert orjson.loads(fresh.stdout)["namespaces"] == {}

    bad = olp_cache(home, "stats", "--since", "yesterday")
    assert bad.returncode == 2
    assert "--since" in bad.stderr and "Traceback" not in bad.stderr

    forever = olp_cache(home, "stats", "--since", "99999999999999999999d", "--json")
    assert forever.returncode == 0, forever.stderr  # (was an OverflowError traceback)
    assert orjson.loads(forever.stdout)["since"] == "1970-01-01T00:00:00Z"

    (home / "ledger.db").write_bytes(b"this is not a database" * 100)
    damaged = olp_cache(home, "stats")
    assert damaged.returncode == 1
    assert "ledger" in damaged.stderr and "Traceback" not in damaged.stderr
    assert (home / "ledger.db").exists()  # never silently discarded
