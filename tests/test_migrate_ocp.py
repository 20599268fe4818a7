"""`olp migrate-from-ocp`: an OCP database built with OCP's own schema is imported so that its
keys keep working against a real OLP, its quotas hold, its file is never changed, and a
second run is a no-op."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
import orjson
import pytest

from fakes.upstream import FakeUpstream
from olp_server import olp_server

# OCP's schema, as its key store creates it (the quota columns came in a later migration).
OCP_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  key TEXT UNIQUE NOT NULL,
  name TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  revoked INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS usage_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  key_id INTEGER,
  key_name TEXT NOT NULL DEFAULT 'anonymous',
  model TEXT NOT NULL,
  prompt_chars INTEGER NOT NULL DEFAULT 0,
  response_chars INTEGER NOT NULL DEFAULT 0,
  elapsed_ms INTEGER NOT NULL DEFAULT 0,
  success INTEGER NOT NULL DEFAULT 1,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  FOREIGN KEY (key_id) REFERENCES api_keys(id)
);
CREATE INDEX IF NOT EXISTS idx_usage_created ON usage_log(created_at);
CREATE INDEX IF NOT EXISTS idx_usage_key ON usage_log(key_id);
CREATE TABLE IF NOT EXISTS response_cache (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  hash TEXT UNIQUE NOT NULL,
  model TEXT NOT NULL,
  response TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (datetime('now')),
  last_hit_at TEXT,
  hits INTEGER NOT NULL DEFAULT 0
);
ALTER TABLE api_keys ADD COLUMN quota_daily INTEGER DEFAULT NULL;
ALTER TABLE api_keys ADD COLUMN quota_weekly INTEGER DEFAULT NULL;
ALTER TABLE api_keys ADD COLUMN quota_monthly INTEGER DEFAULT NULL;
"""

LIVE = "ocp_" + "L" * 32
KID = "ocp_" + "K" * 32
REVOKED = "ocp_" + "R" * 32
ADMIN = "ocp-admin-secret-0123456789"


def make_ocp_home(home: Path) -> Path:
    """~/.ocp as OCP leaves it: ocp.db in WAL mode (rows still in the log) and admin-key."""
    home.mkdir(mode=0o700)
    conn = sqlite3.connect(home / "ocp.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # keep rows in the -wal file, as OCP may
    conn.executescript(OCP_SCHEMA)
    conn.executemany(
        "INSERT INTO api_keys (key, name, revoked, quota_daily, quota_weekly, quota_monthly) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [
            (LIVE, "laptop", 0, None, None, None),
            (KID, "kid", 0, 2, 10, 40),
            (REVOKED, "old-phone", 1, None, None, None),
        ],
    )
    conn.executemany(
        "INSERT INTO usage_log (key_id, key_name, model, prompt_chars, response_chars, "
        "elapsed_ms, success, created_at) VALUES (?, ?, ?, 10, 20, ?, ?, ?)",
        [
            (2, "kid", "claude-sonnet-4-6", 900, 1, _sqlite_time(time.time() - 60)),
            (1, "laptop", "claude-opus-4-1", 1500, 0, _sqlite_time(time.time() - 3 * 86_400)),
            (None, "anonymous", "claude-haiku-4-5", 300, 1, "not a time"),
        ],
    )
    conn.close()  # (closing checkpoints; reopen without to leave a log behind)
    conn = sqlite3.connect(home / "ocp.db", isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute(
        "INSERT INTO usage_log (key_id, key_name, model, elapsed_ms, created_at) "
        "VALUES (1, 'laptop', 'claude-sonnet-4-6', 700, ?)",
        (_sqlite_time(time.time() - 120),),
    )
    os.chmod(home / "ocp.db", 0o600)
    (home / "admin-key").write_text(ADMIN + "\n")
    # The connection stays open: a WAL database with its -wal and -shm beside it.
    _open_connections.append(conn)
    return home


_open_connections: list[sqlite3.Connection] = []


def _sqlite_time(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def migrate(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "olp", "migrate-from-ocp", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def ocp(tmp_path: Path) -> Path:
    home = make_ocp_home(tmp_path / "ocp")
    yield home
    while _open_connections:
        _open_connections.pop().close()


def test_migration_keeps_keys_working_and_ocp_untouched(
    tmp_path: Path, ocp: Path, upstream: FakeUpstream
) -> None:
    olp_home = tmp_path / "olp-home"
    olp_home.mkdir()
    config = {
        "providers": {
            "alpha": {
                "type": "openai-http",
                "base_url": upstream.openai_base_url,
                "models": ["gpt-4o-mini"],
            }
        }
    }
    (olp_home / "config.json").write_bytes(orjson.dumps(config))
    user_home = tmp_path / "user"  # OCP's systemd unit, as OCP's setup writes it
    unit = user_home / ".config/systemd/user/ocp-proxy.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(
        "[Service]\nEnvironment=CLAUDE_PROXY_PORT=3456\nEnvironment=CLAUDE_TIMEOUT=120000\n"
        'Environment="CLAUDE_MAX_CONCURRENT=3"\n'
        'Environment="CLAUDE_SYSTEM_PROMPT=Answer in French."\n'
    )
    env = {"OLP_HOME": str(olp_home), "HOME": str(user_home)}
    before = snapshot(ocp)
    assert {"ocp.db", "ocp.db-wal", "ocp.db-shm", "admin-key"} <= before.keys()

    dry = migrate(env, "--ocp-home", str(ocp), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "Would import" in dry.stdout and "nothing changed" in dry.stdout
    assert not (olp_home / "keys.db").exists() or "kid" not in _names(olp_home)
    assert orjson.loads((olp_home / "config.json").read_bytes()) == config

    first = migrate(env, "--ocp-home", str(ocp))
    assert first.returncode == 0, first.stderr
    assert "usage_log row 3: unreadable time" in first.stdout
    added = orjson.loads((olp_home / "config.json").read_bytes())["providers"]["claude"]
    assert added == {
        "type": "claude-cli",
        "max_concurrent": 3,
        "system_prompt": "Answer in French.",
        "timeouts": {"total_ms": 120000, "first_byte_ms": 60000, "idle_ms": 60000},
    }
    assert snapshot(ocp) == before  # OCP's files, byte for byte

    state = _state(olp_home)
    second = migrate(env, "--ocp-home", str(ocp))
    assert second.returncode == 0, second.stderr
    assert "0 to import, 4 already in OLP" in second.stdout
    assert "imported 0 usage rows" in second.stdout
    assert _state(olp_home) == state  # keys, ledger and config: nothing changed
    assert snapshot(ocp) == before

    imported = _ledger(olp_home)
    assert sorted((r[0], r[1], r[2]) for r in imported) == [
        ("kid", 200, "claude"),
        ("laptop", 200, "claude"),
        ("laptop", 502, "claude"),
    ]

    with olp_server(tmp_path / "serve", None, {"OLP_HOME": str(olp_home)}) as server:
        chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
        url = server.base_url + "/v1/chat/completions"
        ok = httpx.post(url, json=chat, headers={"Authorization": f"Bearer {LIVE}"})
        assert ok.status_code == 200, ok.text
        revoked = httpx.post(url, json=chat, headers={"Authorization": f"Bearer {REVOKED}"})
        assert revoked.status_code == 401
        assert revoked.json()["error"]["code"] == "invalid_api_key"
        # kid's daily quota of 2: one request today in OCP's log, so one more, then 429.
        kid = {"Authorization": f"Bearer {KID}"}
        assert httpx.post(url, json=chat, headers=kid).status_code == 200
        limited = httpx.post(url, json=chat, headers=kid)
        assert limited.status_code == 429
        assert limited.json()["error"]["code"] == "key_limit_exceeded"
        # OCP's admin key is an owner key here.
        status = httpx.get(
            server.base_url + "/v0/management/status",
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert status.status_code == 200


def test_missing_ocp_database_is_a_clear_error(tmp_path: Path) -> None:
    result = migrate({"OLP_HOME": str(tmp_path / "olp")}, "--ocp-home", str(tmp_path / "none"))
    assert result.returncode == 2
    assert "no OCP database at" in result.stderr and "--ocp-home" in result.stderr
    assert "Traceback" not in result.stderr


def _names(olp_home: Path) -> set[str]:
    conn = sqlite3.connect(olp_home / "keys.db")
    try:
        return {row[0] for row in conn.execute("SELECT name FROM keys")}
    finally:
        conn.close()


def _ledger(olp_home: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(olp_home / "ledger.db")
    try:
        return conn.execute(
            "SELECT key_name, status, provider FROM ledger_requests WHERE imported_from = 'ocp'"
        ).fetchall()
    finally:
        conn.close()


def _state(olp_home: Path) -> tuple[object, ...]:
    conn = sqlite3.connect(olp_home / "keys.db")
    try:
        keys = conn.execute(
            "SELECT name, tier, secret_sha256, revoked_at, rpd, rp7d, rp30d FROM keys ORDER BY name"
        ).fetchall()
    finally:
        conn.close()
    return keys, _ledger(olp_home), (olp_home / "config.json").read_bytes()
