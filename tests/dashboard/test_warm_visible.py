"""A CLI provider's warm pool on `/health` (owner), `/v0/management/status` and `/metrics`,
with the fake claude CLI (tests/fakes/fake_cli.py) behind a real OLP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from fakes.cli import fake_env, install, records
from olp_server import OWNER_TOKEN, ThreadServer, eventually, olp_server

AUTH = {"authorization": f"Bearer {OWNER_TOKEN}"}


def config(tmp_path: Path) -> dict[str, Any]:
    bin_dir = install(tmp_path / "bin", "claude")
    env = fake_env(tmp_path / "record.jsonl", "success_stream_json_partial")
    return {
        "providers": {
            "claude": {"type": "claude-cli", "command": str(bin_dir / "claude"), "env": env},
            "http": {"type": "openai-http", "base_url": "http://127.0.0.1:9/v1"},
        },
        "routing": {"chains": {"chat": [{"provider": "claude", "model": "claude-sonnet-4-5"}]}},
        "cache": {"enabled": False},
    }


def chat(olp: ThreadServer, text: str) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": text}]}
    resp = httpx.post(f"{olp.base_url}/v1/chat/completions", json=body, headers=AUTH, timeout=60)
    assert resp.status_code == 200, resp.text


def warm(olp: ThreadServer) -> dict[str, Any] | None:
    status = httpx.get(f"{olp.base_url}/v0/management/status", headers=AUTH).json()
    [claude] = [p for p in status["providers"] if p["name"] == "claude"]
    value: dict[str, Any] | None = claude["warm"]
    return value


def samples(olp: ThreadServer) -> dict[str, float]:
    text = httpx.get(f"{olp.base_url}/metrics", headers=AUTH).text
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("olp_cli_") and s.labels.get("provider") == "claude"
    }


def test_the_warm_pool_is_visible(tmp_path: Path) -> None:
    with olp_server(tmp_path, config(tmp_path)) as olp:
        first = warm(olp)
        assert first is not None and first["size"] == 1  # claude-cli's default
        assert (first["hits"], first["misses"], first["cold_start_ms_p50"]) == (0, 0, None)
        chat(olp, "one")
        assert eventually(lambda: (warm(olp) or {}).get("waiting") == 1, 20)
        chat(olp, "two")
        stats = warm(olp)
        assert stats is not None
        assert (stats["hits"], stats["misses"]) == (1, 1)
        assert stats["cold_start_ms_p50"] is not None
        assert stats["warm_start_ms_p50"] is not None
        owner = httpx.get(f"{olp.base_url}/health", headers=AUTH).json()["providers"]
        assert owner["claude"]["warm"]["hits"] == 1
        assert owner["http"]["warm"] is None  # an HTTP provider keeps no process
        metrics = samples(olp)
        assert metrics["olp_cli_warm_size"] == 1
        assert metrics["olp_cli_warm_hits_total"] == 1
        assert metrics["olp_cli_warm_misses_total"] == 1
        assert metrics["olp_cli_cold_start_ms"] > 0
        assert metrics["olp_cli_warm_start_ms"] > 0
        assert eventually(lambda: samples(olp)["olp_cli_warm_waiting"] == 1, 20)
    # The two answered runs; the waiting one was killed unanswered at shutdown.
    assert [run["stdin"].count('"type":"user"') for run in records(tmp_path / "record.jsonl")] == [
        1,
        1,
    ]
