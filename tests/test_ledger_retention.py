"""`ledger.retention_days`: old usage rows go, recent ones stay (real SQLite files, an
injectable clock, and a real server whose config.json is edited while it runs)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from olp.accounts.ledger import Ledger
from olp.accounts.ledger_retention import Retention
from olp.accounts.ledger_rows import LEDGER_FILE, AttemptRecord, RequestRecord
from olp.config import load_config
from olp.errors import ConfigError

from fakes.upstream import FakeUpstream
from olp_server import OWNER_TOKEN, ProcessServer, eventually, write_config

DAY = 86_400.0
NOW = time.time()


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def request(rid: str, ts: float) -> RequestRecord:
    return RequestRecord(rid, "k_alice", "alice", "m", "alpha", "x", 200, ts=ts)


def attempt(rid: str, ts: float) -> AttemptRecord:
    return AttemptRecord(rid, 0, "alpha", "x", "served", code=None, ts=ts)


def ids(db: Path, table: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute(f"SELECT request_id FROM {table} ORDER BY id")]


def kept(db: Path, want: list[str]) -> bool:
    """Both tables hold exactly the rows of `want`, in order."""
    return ids(db, "ledger_requests") == want and ids(db, "ledger_attempts") == want


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / LEDGER_FILE


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ledger(db: Path, clock: Clock) -> Iterator[Ledger]:
    led = Ledger(db, interval_s=0.02, retention=Retention(40, every_s=3600, clock=clock))
    yield led
    led.close()


def record(led: Ledger, rid: str, age_days: float) -> None:
    ts = NOW - age_days * DAY
    led.record_attempt(attempt(rid, ts))
    led.record_request(request(rid, ts))


def test_rows_past_the_retention_go_and_the_rest_stay(
    ledger: Ledger, db: Path, clock: Clock
) -> None:
    for rid, age in (("old1", 60), ("old2", 41), ("mid", 10), ("new", 0)):
        record(ledger, rid, age)
    # (The pass at start may have run before these rows were written: an hour later
    # another one is due either way. The backlog test below shows the one at start.)
    clock.now += 3600
    writer_round(ledger)
    assert kept(db, ["mid", "new"])
    # The next pass is an hour later: an old row written meanwhile waits for it.
    record(ledger, "late", 50)
    writer_round(ledger)
    assert kept(db, ["mid", "new", "late"])
    clock.now += 3600
    writer_round(ledger)
    assert kept(db, ["mid", "new"])
    # 31 days on, "mid" is 41 days old and "new" 31: one goes, one stays.
    clock.now += 31 * DAY
    writer_round(ledger)
    assert kept(db, ["new"])


def writer_round(led: Ledger) -> None:
    """Return once the writer has written all that was recorded, then run its retention
    pass if one is due: each flush is a round of its own, and a round writes, then prunes."""
    assert led.flush_sync() and led.flush_sync()


def test_a_long_backlog_goes_a_chunk_per_round_while_rows_keep_coming(
    db: Path, clock: Clock
) -> None:
    led = Ledger(db, interval_s=0.01)
    for i in range(1050):
        record(led, f"old{i}", 100)
    led.close()
    retention = Retention(40, chunk_rows=100, clock=clock)
    led = Ledger(db, interval_s=0.01, retention=retention)
    try:
        for i in range(20):
            record(led, f"new{i}", 0)
            time.sleep(0.005)
        assert eventually(lambda: kept(db, [f"new{i}" for i in range(20)]))
    finally:
        led.close()


def test_retention_off_keeps_every_row(db: Path, clock: Clock) -> None:
    led = Ledger(db, interval_s=0.01, retention=Retention(0, every_s=0, clock=clock))
    try:
        record(led, "ancient", 3650)
        assert led.flush_sync()
        clock.now += 3650 * DAY
        record(led, "new", 0)
        assert led.flush_sync()
        time.sleep(0.1)  # several writer rounds
        assert kept(db, ["ancient", "new"])
    finally:
        led.close()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (10, "must be 0 (keep every row) or at least 32, got 10"),
        (-1, "must be ≥ 0"),
        ("90", "must be an integer"),
    ],
)
def test_a_retention_too_short_for_the_monthly_limits_is_refused(
    tmp_path: Path, value: Any, problem: str
) -> None:
    write_config(tmp_path, {"providers": {}, "ledger": {"retention_days": value}})
    with pytest.raises(ConfigError) as err:
        load_config({"OLP_HOME": str(tmp_path)}, detect_local_servers=False)
    assert "ledger.retention_days" in str(err.value) and problem in str(err.value)


def test_retention_set_in_a_running_server_applies_at_once(
    tmp_path: Path, alpha: FakeUpstream
) -> None:
    home = tmp_path / "home"

    def config(days: int) -> dict[str, Any]:
        return {
            "providers": {"a": {"type": "openai-http", "base_url": alpha.openai_base_url}},
            "routing": {"chains": {"m": [{"provider": "a", "model": "x"}]}},
            "ledger": {"retention_days": days},
        }

    led = Ledger.open(home)  # a year of history, from before this server
    record(led, "last-year", 365)
    led.close()
    write_config(home, config(0))
    with ProcessServer(home) as server:
        answer = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {OWNER_TOKEN}"},
            timeout=30,
        )
        assert answer.status_code == 200
        rid = answer.headers["x-olp-request-id"]
        db = home / LEDGER_FILE
        assert eventually(lambda: kept(db, ["last-year", rid]), 10)
        write_config(home, config(90))
        assert eventually(lambda: kept(db, [rid]), 10)
