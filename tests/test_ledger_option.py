"""`"ledger": {"enabled": …}`: on by default (rows for every request); off writes none."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from olp.accounts import KeyLimits
from olp.accounts.keystore import KeyStore, keys_db_path
from olp.accounts.ledger_rows import LEDGER_FILE
from olp.config import load_config
from olp.errors import ConfigError

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ThreadServer, olp_server, server_env


def config(up: FakeUpstream, **extra: Any) -> dict[str, Any]:
    return {
        "providers": {
            "up": {"type": "openai-http", "base_url": up.openai_base_url, "models": ["m"]}
        },
        "cache": {"enabled": False},
        **extra,
    }


def ask(server: ThreadServer, *, stream: bool, key: str = OWNER_TOKEN) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        timeout=20,
        headers={"authorization": f"Bearer {key}"},
        json={"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]},
    )


def counts(home: Path) -> tuple[int, int]:
    """(request rows, attempt rows); the server has stopped, so its ledger is flushed."""
    with sqlite3.connect(home / LEDGER_FILE) as conn:
        requests = conn.execute("SELECT COUNT(*) FROM ledger_requests").fetchone()[0]
        attempts = conn.execute("SELECT COUNT(*) FROM ledger_attempts").fetchone()[0]
    return int(requests), int(attempts)


def traffic(server: ThreadServer) -> None:
    for stream in (False, True, False, True):
        resp = ask(server, stream=stream)
        assert resp.status_code == 200, resp.text


def test_default_on_writes_a_row_per_request_and_attempt(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    with olp_server(tmp_path, config(upstream)) as server:
        assert server.config.ledger.enabled
        traffic(server)
    assert counts(tmp_path / "olp-home") == (4, 4)


def test_explicitly_on_is_the_default(tmp_path: Path, upstream: FakeUpstream) -> None:
    with olp_server(tmp_path, config(upstream, ledger={"enabled": True})) as server:
        traffic(server)
    assert counts(tmp_path / "olp-home") == (4, 4)


def test_off_writes_no_rows_after_traffic(tmp_path: Path, upstream: FakeUpstream) -> None:
    with olp_server(tmp_path, config(upstream, ledger={"enabled": False})) as server:
        assert not server.config.ledger.enabled
        traffic(server)
        usage = httpx.get(
            f"{server.base_url}/v0/management/usage",
            headers={"authorization": f"Bearer {OWNER_TOKEN}"},
            timeout=20,
        )
        assert usage.status_code == 200, usage.text
    # The file may exist (it is opened at start, so a broken one still stops the start),
    # but nothing was recorded in it.
    ledger = tmp_path / "olp-home" / LEDGER_FILE
    assert not ledger.exists() or counts(tmp_path / "olp-home") == (0, 0)


def test_off_still_enforces_token_limits(tmp_path: Path, upstream: FakeUpstream) -> None:
    """Limits count tokens from the request outcome, not from the ledger."""
    home = tmp_path / "olp-home"
    home.mkdir(parents=True)
    store = KeyStore.open(keys_db_path(home))
    try:
        member = store.create("kid", tier="member", limits=KeyLimits(tpd=1)).secret
    finally:
        store.close()
    with olp_server(tmp_path, config(upstream, ledger={"enabled": False})) as server:
        assert ask(server, stream=False, key=member).status_code == 200
        refused = ask(server, stream=False, key=member)
        assert refused.status_code == 429, refused.text
        assert orjson.loads(refused.content)["error"]["code"] == "key_limit_exceeded"
    assert counts(home) == (0, 0)


@pytest.mark.parametrize(
    ("ledger", "problem"),
    [({"enabled": "no"}, "ledger.enabled"), ({"enable": False}, "ledger.enable")],
)
def test_bad_ledger_settings_are_config_errors(
    tmp_path: Path, ledger: dict[str, Any], problem: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_bytes(orjson.dumps({"ledger": ledger}))
    with pytest.raises(ConfigError) as info:
        load_config(server_env(home), detect_local_servers=False)
    assert problem in str(info.value)
