"""$OLP_HOME and every file OLP makes in it are the owner's alone, whatever the umask."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import httpx

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ProcessServer, write_config


def _config(upstream: FakeUpstream) -> dict[str, object]:
    return {
        "auth": {"allow_anonymous": True},  # the owner key made at start is never shown
        "providers": {
            "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
        },
    }


def _modes(home: Path) -> dict[str, int]:
    return {
        str(p.relative_to(home)): stat.S_IMODE(p.stat().st_mode) for p in [home, *home.rglob("*")]
    }


def _loose(home: Path) -> dict[str, str]:
    return {
        name: oct(mode)
        for name, mode in _modes(home).items()
        if mode & ~(0o700 if (home / name).is_dir() else 0o600)
    }


def _chat(server: ProcessServer, token: str | None = OWNER_TOKEN) -> None:
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {token}"} if token else {},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text


def test_a_new_home_and_its_files_are_private_under_umask_022(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    home = tmp_path / "home"
    config_dir = tmp_path / "config-source"
    write_config(config_dir, _config(upstream))
    old = os.umask(0o022)
    try:
        os.makedirs(home, mode=0o777)  # as a umask-022 `mkdir` would leave it: 0755
        os.replace(config_dir / "config.json", home / "config.json")
    finally:
        os.umask(old)
    with ProcessServer(home, {"OLP_OWNER_TOKEN": ""}, umask=0o022) as server:
        _chat(server, token=None)
        names = set(_modes(home))
        assert {"cache.db", "ledger.db", "quota.db", "owner_key.sha256"} <= names
        assert {"cache.db-wal", "ledger.db-wal"} <= names  # open while the server runs
        assert _loose(home) == {}


def test_files_left_readable_are_tightened_at_start_with_a_log_line(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    home = tmp_path / "home"
    write_config(home, _config(upstream))
    old = os.umask(0o022)
    try:
        sqlite3.connect(home / "ledger.db").execute("CREATE TABLE t (x)").connection.close()
    finally:
        os.umask(old)
    home.chmod(0o755)
    (home / "config.json").chmod(0o644)
    assert _loose(home)
    with ProcessServer(home, umask=0o022) as server:
        _chat(server)
        assert _loose(home) == {}
        server.terminate()
        assert server.proc is not None
        server.proc.wait(timeout=20)
        assert server.proc.stderr is not None
        log = server.proc.stderr.read()
    assert "permissions_tightened" in log
    assert "ledger.db" in log and "config.json" in log


def test_tightening_keeps_the_owners_own_bits_of_a_second_logins_programs(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    home = tmp_path / "home"
    write_config(home, _config(upstream))
    tool = home / "accounts" / "partner" / ".local" / "bin" / "tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho ok\n")
    tool.chmod(0o755)
    with ProcessServer(home, umask=0o022) as server:
        _chat(server)
        assert stat.S_IMODE(tool.stat().st_mode) == 0o700  # others' bits gone, still runs
        assert stat.S_IMODE(tool.parent.stat().st_mode) == 0o700
