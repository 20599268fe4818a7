"""`olp usage` (the real executable) and `GET /v0/management/usage` (a real server) over a
ledger written by the real writer.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from olp.accounts import Identity, KeyLimits
from olp.accounts.ledger import Ledger
from olp.accounts.ledger_rows import LEDGER_FILE, RequestRecord
from olp.accounts.limits import LimitKeeper, LimitUsage, UsageSeed
from olp.accounts.pricing import NO_COST, Cost
from olp.accounts.usage_query import read_limit_seeds
from olp.cli.usage import usd
from olp.errors import InvalidApiKey, KeyLimitExceeded
from olp.ir import Usage

from olp_server import OWNER_TOKEN, olp_server

DAY = 86_400
NOW = time.time()
TODAY = time.strftime("%Y-%m-%d", time.gmtime(NOW - 60))  # the day of the rows' `ts`
OLD_DAY = time.strftime("%Y-%m-%d", time.gmtime(NOW - 10 * DAY))
SUB = Cost(0.0, 0.01, "registry")  # a subscription answer worth $0.01 at API prices
METERED = Cost(0.002, 0.002, "registry")


def rec(rid: str, key: str, provider: str | None, model: str | None, **kw: Any) -> RequestRecord:
    fields: dict[str, Any] = {"status": 200, "ts": NOW - 60, "usage": Usage(1000, 100)}
    fields.update(kw)
    return RequestRecord(rid, f"k_{key}", key, "smart", provider, model, **fields)


SEED = [
    rec("a1", "alice", "claude", "claude-sonnet-4-5", cost=SUB),
    rec("a2", "alice", "claude", "claude-sonnet-4-5", cost=SUB),
    rec("a3", "alice", "claude", "claude-sonnet-4-5", cost=SUB),
    rec("a4", "alice", "claude", "claude-sonnet-4-5", cache="hit", cost=NO_COST, usage=None),
    rec("b1", "bob", "alpha", "gpt-4o-mini", cost=METERED),
    rec("b2", "bob", "alpha", "gpt-4o-mini", cost=METERED),
    rec("b3", "bob", None, None, status=503, error_code="all_providers_failed", usage=None),
    rec("b4", "bob", "alpha", "local-llama", cost=Cost(None, None, "unknown")),
    rec("old", "alice", "alpha", "gpt-4o-mini", cost=METERED, ts=NOW - 10 * DAY),
]


def seed(home: Path, records: list[RequestRecord] = SEED) -> None:
    ledger = Ledger(home / LEDGER_FILE)
    for record in records:
        ledger.record_request(record)
    ledger.close()


@dataclass
class Olp:
    home: Path

    def usage(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"], "HOME": str(self.home), "OLP_HOME": str(self.home)}
        return subprocess.run(
            [sys.executable, "-m", "olp", "usage", *args],
            env=env,
            capture_output=True,
            encoding="utf-8",
            timeout=60,
            check=False,
        )

    def json(self, *args: str) -> dict[str, Any]:
        done = self.usage(*args, "--format", "json")
        assert done.returncode == 0, done.stderr
        report: dict[str, Any] = orjson.loads(done.stdout)
        return report


@pytest.fixture
def olp(tmp_path: Path) -> Olp:
    home = tmp_path / "olp-home"
    home.mkdir()
    seed(home)
    return Olp(home)


def by_group(report: dict[str, Any], field: str) -> dict[str, dict[str, Any]]:
    return {row[field]: row for row in report["rows"]}


def test_json_by_provider(olp: Olp) -> None:
    report = olp.json("--by", "provider")
    assert report["by"] == "provider"
    assert report["since"] == pytest.approx(time.time() - 7 * DAY, abs=30)
    rows = by_group(report, "provider")
    assert set(rows) == {"claude", "alpha", "(none)"}
    claude, alpha = rows["claude"], rows["alpha"]
    assert claude["requests"] == 4 and claude["cache_hits"] == 1
    assert claude["prompt_tokens"] == 3000 and claude["completion_tokens"] == 300
    assert claude["cost_usd"] == 0 and claude["api_cost_usd"] == pytest.approx(0.03)
    assert claude["saved_usd"] == pytest.approx(0.03)
    # The 10-day-old row is outside the default 7 days; the unpriced one is counted apart.
    assert alpha["requests"] == 3 and alpha["unpriced"] == 1
    assert alpha["cost_usd"] == pytest.approx(0.004) and alpha["saved_usd"] == 0
    assert rows["(none)"]["errors"] == 1
    totals = report["totals"]
    assert totals["requests"] == 8 and totals["errors"] == 1 and totals["unpriced"] == 1
    assert totals["api_cost_usd"] == pytest.approx(0.034)
    assert totals["cost_usd"] == pytest.approx(0.004)


def test_json_by_key_names_the_key(olp: Olp) -> None:
    rows = by_group(olp.json(), "key")
    assert rows["k_alice"]["key_name"] == "alice" and rows["k_alice"]["requests"] == 4
    assert rows["k_bob"]["requests"] == 4 and rows["k_bob"]["errors"] == 1


def test_json_by_day_and_since(olp: Olp) -> None:
    assert [r["day"] for r in olp.json("--by", "day")["rows"]] == [TODAY]
    month = olp.json("--by", "day", "--since", "30d")["rows"]
    assert [r["day"] for r in month] == [OLD_DAY, TODAY]  # oldest first
    assert month[0]["requests"] == 1
    future = time.strftime("%Y-%m-%d", time.gmtime(NOW + 2 * DAY))
    assert olp.json("--since", future)["rows"] == []


def test_csv_by_model(olp: Olp) -> None:
    done = olp.usage("--by", "model", "--format", "csv")
    assert done.returncode == 0, done.stderr
    table = list(csv.DictReader(io.StringIO(done.stdout)))
    assert list(table[0]) == [
        "model", "requests", "errors", "prompt_tokens", "completion_tokens", "cached_tokens",
        "cost_usd", "api_cost_usd", "saved_usd", "cache_hits", "unpriced",
    ]  # fmt: skip
    rows = {r["model"]: r for r in table}
    assert set(rows) == {"claude-sonnet-4-5", "gpt-4o-mini", "local-llama", "(none)"}
    assert rows["gpt-4o-mini"]["requests"] == "2"
    assert float(rows["gpt-4o-mini"]["cost_usd"]) == pytest.approx(0.004)
    assert rows["local-llama"]["unpriced"] == "1"


def test_csv_with_no_rows_still_has_its_header(olp: Olp) -> None:
    done = olp.usage("--since", "2099-01-01", "--by", "key", "--format", "csv")
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "key,key_name,requests,errors,prompt_tokens,completion_tokens,cached_tokens,"
        "cost_usd,api_cost_usd,saved_usd,cache_hits,unpriced"
    ]


def test_table_is_readable(olp: Olp) -> None:
    done = olp.usage("--by", "key")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    lines = out.splitlines()
    assert lines[0].startswith("usage since ") and lines[0].endswith(", by key")
    header = lines[2].split()
    assert header[:2] == ["key", "name"] and "saved" in header and "API" in header
    alice = next(line for line in lines if "k_alice" in line)
    assert alice.split()[:3] == ["k_alice", "alice", "4"]
    assert "$0.0300" in alice  # API cost of three subscription answers
    bob = next(line for line in lines if "k_bob" in line)
    assert "$0.0040*" in bob  # bob has an unpriced request: marked
    total = next(line for line in lines if line.startswith("total"))
    assert total.split()[1:3] == ["8", "1"]
    assert "1 request(s) with no known cost" in out


@pytest.mark.parametrize("by", ["provider", "model", "day"])
def test_table_by_every_grouping(olp: Olp, by: str) -> None:
    done = olp.usage("--by", by, "--since", "30d")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].split()[0] == by
    assert (
        next(line for line in done.stdout.splitlines() if line.startswith("total")).split()[1]
        == "9"
    )


def test_table_for_an_empty_period(olp: Olp) -> None:
    done = olp.usage("--since", "2099-01-01")
    assert done.returncode == 0
    assert "no requests in this period" in done.stdout


@pytest.mark.parametrize("since", ["yesterday", "7x", "2026-13-45", "-3d", ""])
def test_bad_since_is_a_clear_error(olp: Olp, since: str) -> None:
    done = olp.usage("--since", since)
    assert done.returncode == 2
    assert "--since" in done.stderr and "7d" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("since", ["99999999999999999999d", "0001-01-01"])
def test_since_before_1970_means_everything(olp: Olp, since: str) -> None:
    everything = olp.json("--since", since)
    assert everything["since"] == 0
    month = olp.json("--since", "30d")["totals"]["requests"]
    assert everything["totals"]["requests"] >= month > 0


def test_bad_grouping_is_refused(olp: Olp) -> None:
    done = olp.usage("--by", "color")
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_no_ledger_yet(tmp_path: Path) -> None:
    olp = Olp(tmp_path)
    done = olp.usage()
    assert done.returncode == 0
    assert "no usage recorded yet" in done.stdout
    done = olp.usage("--format", "json")
    assert done.returncode == 0 and "no usage recorded yet" in done.stderr
    assert orjson.loads(done.stdout)["rows"] == []
    assert not (tmp_path / LEDGER_FILE).exists()  # reading never creates it


def test_corrupted_ledger_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / LEDGER_FILE).write_bytes(b"garbage" * 1000)
    done = Olp(tmp_path).usage()
    assert done.returncode == 1
    assert "not a valid OLP database" in done.stderr and "Traceback" not in done.stderr


# -- GET /v0/management/usage ------------------------------------------------------------

MEMBER_TOKEN = "member-token"


class TwoKeys:
    """The owner token and one member key (the Authenticator protocol the key store uses)."""

    def authenticate(self, token: str | None) -> Identity:
        if token == OWNER_TOKEN:
            return Identity("owner", "owner", "owner")
        if token == MEMBER_TOKEN:
            return Identity("k_bob", "bob", "member")
        raise InvalidApiKey("OLP API key is invalid or has been revoked.")


@pytest.fixture
def server_home(tmp_path: Path) -> Path:
    home = tmp_path / "olp-home"
    home.mkdir()
    seed(home)
    return home


def get(base: str, token: str | None, query: str = "") -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{base}/v0/management/usage{query}", headers=headers, timeout=10)


def test_endpoint_owner_gets_json_member_gets_403(tmp_path: Path, server_home: Path) -> None:
    with olp_server(tmp_path, {"providers": {}}, authenticator=TwoKeys()) as server:
        resp = get(server.base_url, OWNER_TOKEN, "?by=provider&since=30d")
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "application/json"
        body = resp.json()
        assert set(body) == {"generated_at", "since", "by", "rows", "totals"}
        assert body["by"] == "provider" and body["since"] == pytest.approx(
            time.time() - 30 * DAY, abs=30
        )
        assert by_group(body, "provider")["alpha"]["requests"] == 4  # the old row is in 30d
        assert body["totals"]["requests"] == 9

        denied = get(server.base_url, MEMBER_TOKEN)
        assert denied.status_code == 403
        assert denied.json()["error"]["code"] == "owner_required"
        assert get(server.base_url, None).status_code == 401


def test_endpoint_defaults_and_bad_parameters(tmp_path: Path, server_home: Path) -> None:
    with olp_server(tmp_path, {"providers": {}}) as server:
        body = get(server.base_url, OWNER_TOKEN).json()
        assert body["by"] == "key" and body["since"] == pytest.approx(time.time() - 7 * DAY, abs=30)
        assert by_group(body, "key")["k_alice"]["requests"] == 4
        bad = get(server.base_url, OWNER_TOKEN, "?by=color")
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "by"
        bad = get(server.base_url, OWNER_TOKEN, "?since=soon")
        assert bad.status_code == 400 and "7d" in bad.json()["error"]["message"]


def test_endpoint_sees_rows_recorded_a_moment_ago(tmp_path: Path) -> None:
    with olp_server(tmp_path, {"providers": {}}) as server:
        ledger = server.app.ctx.ledger
        for i in range(3):
            ledger.record_request(rec(f"live{i}", "carol", "alpha", "gpt-4o", ts=time.time()))
        body = get(server.base_url, OWNER_TOKEN, "?since=1h").json()
        assert by_group(body, "key")["k_carol"]["requests"] == 3
    # …and the server's shutdown closed the ledger with everything on disk.
    assert Olp(tmp_path / "olp-home").json("--since", "1h")["totals"]["requests"] == 3


# -- the query layer: limit seeds, recent fallbacks and errors ------------------------------

MID_MONTH = 1_794_830_400.0  # 2026-11-16T12:00:00Z


def test_limit_seeds_feed_the_limit_keeper(tmp_path: Path) -> None:
    at = MID_MONTH
    seed(
        tmp_path,
        [
            rec("t1", "alice", "alpha", "m", ts=at - 3600, cost=Cost(0.01, 0.01, "registry")),
            rec("t2", "alice", "claude", "m", ts=at - 30, cost=Cost(0.0, 0.02, "registry")),
            rec("t3", "alice", "alpha", "m", ts=at - 10, status=503, usage=None,
                error_code="all_providers_failed"),  # admitted, then failed: counts
            rec("x1", "alice", None, None, ts=at - 5, status=429, usage=None,
                error_code="key_limit_exceeded"),  # refused by the limiter: does not
            rec("x2", "alice", None, None, ts=at - 5, status=403, usage=None,
                error_code="model_not_allowed"),
            rec("m1", "alice", "alpha", "m", ts=at - 5 * DAY, cost=Cost(0.5, 0.5, "registry")),
            rec("p1", "alice", "alpha", "m", ts=at - 20 * DAY, cost=Cost(9.0, 9.0, "registry")),
            rec("b1", "bob", "alpha", "unknown", ts=at - 60 * 5, cost=Cost(None, None, "unknown")),
        ],
    )  # fmt: skip
    seeds = {s.key_id: s for s in read_limit_seeds(tmp_path / LEDGER_FILE, at)}
    alice = seeds["k_alice"]
    assert alice.requests_today == 3
    assert alice.tokens_today == 2 * 1100
    assert alice.usd_month == pytest.approx(0.01 + 0.02 + 0.5)  # not October's 9.0
    assert alice.recent_requests == (at - 30, at - 10)
    assert seeds["k_bob"] == UsageSeed("k_bob", 1, 1100, 0.0, ())

    keeper = LimitKeeper(clock=lambda: at)
    keeper.seed(seeds.values())
    day = int(at // DAY)
    assert sorted(alice.earlier_days) == [(day - 20, 1), (day - 5, 1)]
    assert keeper.usage("k_alice") == LimitUsage(
        requests_last_minute=2,
        requests_today=3,
        requests_7d=4,
        requests_30d=5,
        tokens_today=2200,
        usd_month=pytest.approx(0.53),
    )
    limited = Identity("k_alice", "alice", "member", limits=KeyLimits(rpd=3))
    with pytest.raises(KeyLimitExceeded):
        keeper.admit(limited)  # a restart does not hand out a fresh day


def test_limit_seeds_without_a_ledger(tmp_path: Path) -> None:
    assert read_limit_seeds(tmp_path / LEDGER_FILE, MID_MONTH) == []


def test_dollars_in_the_table() -> None:
    assert [usd(v) for v in (0, 0.03, 0.00004, 0.00006, 1, 1234.5)] == [
        "$0.00", "$0.0300", "<$0.0001", "$0.0001", "$1.00", "$1,234.50",
    ]  # fmt: skip
