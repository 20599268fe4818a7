"""Quota: counters, soft triggers, cooldowns ending at their reset, state across restarts."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from olp.providers.base import QuotaSnapshot
from olp.quota import Cooldowns, QuotaBook, QuotaStore
from olp.server.quota_sync import QuotaSync

from fakes.upstream import FakeUpstream, Status, Text
from olp_server import (
    OWNER_TOKEN,
    ProcessServer,
    ThreadServer,
    eventually,
    olp_server,
    write_config,
)

AUTH = {"authorization": f"Bearer {OWNER_TOKEN}"}


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def config(
    alpha: FakeUpstream,
    beta: FakeUpstream,
    soft: dict[str, Any] | None = None,
    alpha_type: str = "openai-http",
) -> dict[str, Any]:
    alpha_url = alpha.openai_base_url if alpha_type == "openai-http" else alpha.base_url
    return {
        "providers": {
            "alpha": {"type": alpha_type, "base_url": alpha_url, "api_key_env": "ALPHA_KEY"},
            "beta": {"type": "openai-http", "base_url": beta.openai_base_url},
        },
        "routing": {
            "chains": {
                "chat": [{"provider": "alpha", "model": "a"}, {"provider": "beta", "model": "b"}]
            },
            "soft_triggers": {"alpha": soft} if soft else {},
        },
        # Identical requests would be answered from the cache: these tests count upstream calls.
        "cache": {"enabled": False},
    }


def ask(server: ThreadServer | ProcessServer) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        headers=AUTH,
        timeout=10,
        json={"model": "chat", "messages": [{"role": "user", "content": "x"}]},
    )


def quota_of(server: ThreadServer | ProcessServer, provider: str) -> dict[str, Any]:
    body = httpx.get(f"{server.base_url}/v0/management/quota", headers=AUTH).json()
    entry: dict[str, Any] = next(p for p in body["providers"] if p["provider"] == provider)
    return entry


def test_daily_request_threshold_skips_before_any_request(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    cfg = config(alpha, beta, {"daily_request_count_threshold": 2})
    with olp_server(tmp_path, cfg, {"ALPHA_KEY": "k"}) as server:
        assert [ask(server).headers["x-olp-provider-used"] for _ in range(2)] == ["alpha"] * 2
        third = ask(server)
        assert third.headers["x-olp-provider-used"] == "beta"
        [skip] = json.loads(third.headers["x-olp-fallback-detail"])
        assert skip["code"] == "SOFT_TRIGGER"
        assert skip["trigger"] == "skip"
        assert "daily_request_count_threshold" in skip["message"]
        assert alpha.calls == 2  # the third request never reached alpha
        status = quota_of(server, "alpha")
        assert status["state"] == "soft_limited"
        assert status["requests_today"] == 2
        assert status["sources"]["requests_today"] == "counter"


# 23:00 UTC: the daily counter starts again in an hour.
LATE_EVENING = 1_800_057_600.0 - 3600


def solo(cfg: dict[str, Any]) -> dict[str, Any]:
    """`cfg` with alpha alone in the chain: a skipped alpha exhausts it."""
    cfg["routing"]["chains"]["chat"] = [{"provider": "alpha", "model": "a"}]
    return cfg


def test_daily_threshold_says_it_clears_at_utc_midnight(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    clock = FakeClock(LATE_EVENING)
    cfg = solo(config(alpha, beta, {"daily_request_count_threshold": 1}))
    with olp_server(tmp_path, cfg, {"ALPHA_KEY": "k"}, clock=clock) as server:
        assert ask(server).status_code == 200
        refused = ask(server)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "3600"  # not the 30 s default
        status = quota_of(server, "alpha")
        assert status["state"] == "soft_limited"
        assert status["reset_at"] == LATE_EVENING + 3600
        clock.now = LATE_EVENING + 3600
        assert ask(server).headers["x-olp-provider-used"] == "alpha"
        assert alpha.calls == 2


def test_five_hour_threshold_clears_when_its_oldest_requests_age_out(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    start = LATE_EVENING
    clock = FakeClock(start)
    soft = {"five_hour_window_percent_threshold": 50, "five_hour_capacity": 4}
    with olp_server(
        tmp_path, solo(config(alpha, beta, soft)), {"ALPHA_KEY": "k"}, clock=clock
    ) as server:
        ask(server)
        clock.now += 120
        ask(server)  # 2 of 4: the trigger fires until the first request leaves the window
        assert ask(server).headers["retry-after"] == str(5 * 3600 - 120)
        assert quota_of(server, "alpha")["reset_at"] == start + 5 * 3600
        clock.now = start + 5 * 3600
        assert ask(server).headers["x-olp-provider-used"] == "alpha"
        assert alpha.calls == 3


def test_five_hour_threshold_counts_against_capacity(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    soft = {"five_hour_window_percent_threshold": 50, "five_hour_capacity": 4}
    with olp_server(tmp_path, config(alpha, beta, soft), {"ALPHA_KEY": "k"}) as server:
        ask(server)
        ask(server)
        assert ask(server).headers["x-olp-provider-used"] == "beta"
        status = quota_of(server, "alpha")
        assert status["five_hour_utilisation"] == {"value": 0.5, "source": "counter/capacity"}


def test_five_hour_threshold_from_upstream_signal(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    reset = int(time.time()) + 3 * 3600  # the 5-hour window refills in 3 hours
    alpha.script(
        Text(
            "hi",
            headers={
                "anthropic-ratelimit-unified-5h-utilization": "0.95",
                "anthropic-ratelimit-unified-reset": str(reset),
            },
        )
    )
    soft = {"five_hour_window_percent_threshold": 90}
    cfg = config(alpha, beta, soft, alpha_type="anthropic-http")
    with olp_server(tmp_path, cfg, {"ALPHA_KEY": "k"}) as server:
        assert ask(server).headers["x-olp-provider-used"] == "alpha"
        second = ask(server)
        assert second.headers["x-olp-provider-used"] == "beta"
        assert alpha.calls == 1
        status = quota_of(server, "alpha")
        assert status["five_hour_utilisation"] == {"value": 0.95, "source": "signal"}
        assert status["reset_at"] == reset


def test_five_hour_signal_clears_at_the_five_hour_windows_reset(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    now = int(time.time())
    five_hour_reset, weekly_reset = now + 2 * 3600, now + 3 * 86400
    alpha.script(
        Text(
            "hi",
            headers={
                "anthropic-ratelimit-unified-5h-utilization": "0.95",
                "anthropic-ratelimit-unified-5h-reset": str(five_hour_reset),
                # The representative window's reset: the weekly one, days away.
                "anthropic-ratelimit-unified-reset": str(weekly_reset),
            },
        )
    )
    soft = {"five_hour_window_percent_threshold": 90}
    cfg = solo(config(alpha, beta, soft, alpha_type="anthropic-http"))
    with olp_server(tmp_path, cfg, {"ALPHA_KEY": "k"}) as server:
        assert ask(server).status_code == 200
        refused = ask(server)
        assert refused.status_code == 429
        assert abs(int(refused.headers["retry-after"]) - 2 * 3600) <= 5
        assert quota_of(server, "alpha")["reset_at"] == five_hour_reset
        assert alpha.calls == 1


def test_cooldown_ends_at_reset_time(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    clock = FakeClock()
    alpha.script(Status(429, {"error": {"message": "slow"}}, {"retry-after": "30"}))
    with olp_server(tmp_path, config(alpha, beta), {"ALPHA_KEY": "k"}, clock=clock) as server:
        assert ask(server).headers["x-olp-provider-used"] == "beta"
        clock.now += 29
        assert ask(server).headers["x-olp-provider-used"] == "beta"
        assert alpha.calls == 1
        assert quota_of(server, "alpha")["state"] == "cooling_down"
        clock.now += 2
        assert ask(server).headers["x-olp-provider-used"] == "alpha"
        assert alpha.calls == 2


def test_quota_exhausted_cools_until_the_signalled_reset(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    clock = FakeClock()
    reset = clock.now + 3600
    alpha.script(
        Status(
            429,
            {"error": {"message": "quota", "code": "insufficient_quota"}},
            {"x-ratelimit-reset-requests": "1h0m0s", "x-ratelimit-remaining-requests": "0"},
        )
    )
    with olp_server(tmp_path, config(alpha, beta), {"ALPHA_KEY": "k"}, clock=clock) as server:
        ask(server)
        until = quota_of(server, "alpha")["cooldowns"][0]["until"]
        assert abs(until - reset) < 5
        clock.now = reset + 1
        assert ask(server).headers["x-olp-provider-used"] == "alpha"


def test_quota_state_survives_restart_and_cli_reset(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    home = tmp_path / "home"
    write_config(home, config(alpha, beta))
    env = {"ALPHA_KEY": "k"}
    alpha.script(Status(429, {"error": {"message": "slow"}}, {"retry-after": "600"}))
    with ProcessServer(home, env) as server:
        assert ask(server).headers["x-olp-provider-used"] == "beta"
    # A new process remembers the cooldown and the counter.
    with ProcessServer(home, env) as server:
        assert ask(server).headers["x-olp-provider-used"] == "beta"
        assert alpha.calls == 1
        assert quota_of(server, "alpha")["requests_today"] == 1
        shown = olp_cli(home, "quota", "--json")
        alpha_state = next(p for p in json.loads(shown)["providers"] if p["provider"] == "alpha")
        assert alpha_state["state"] == "cooling_down"
        said = olp_cli(home, "providers", "reset", "alpha")
        assert said.startswith("alpha: ended 1 cooldown(s) (alpha/a)"), said
        assert "not cooling down" in olp_cli(home, "providers", "reset", "beta")
        deadline = time.monotonic() + 5
        while ask(server).headers["x-olp-provider-used"] != "alpha":
            assert time.monotonic() < deadline, "reset not applied by the running server"
            time.sleep(0.2)


def test_an_idle_server_leaves_the_quota_file_alone(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    # Rewriting unchanged state every second cost an idle server ~1 GB of disk writes a day.
    home = tmp_path / "home"
    write_config(home, config(alpha, beta))
    with ProcessServer(home, {"ALPHA_KEY": "k"}) as server:
        db = sqlite3.connect(home / "quota.db")

        def version() -> int:
            return int(db.execute("PRAGMA data_version").fetchone()[0])  # others' commits

        def quiet_for(seconds: float) -> bool:
            """No commit for `seconds` (the server looks for changes every second)."""
            before = version()
            time.sleep(seconds)
            return version() == before

        # The first save after start, then nothing more: within 10 s, a quiet 2.5 s.
        assert any(quiet_for(2.5) for _ in range(4)), "the server keeps writing"
        idle = version()
        ask(server)  # counters move: the next look saves them
        assert eventually(lambda: version() != idle)
        db.close()


def olp_cli(home: Path, *args: str) -> str:
    env = {**os.environ, "OLP_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "olp", *args], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_quota_without_providers_says_how_to_get_some(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_config(home, {"providers": {}, "routing": {"chains": {}}})
    shown = olp_cli(home, "quota")
    assert "no providers" in shown
    assert "olp setup" in shown


def test_reset_of_unknown_provider_is_a_clear_error(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    home = tmp_path / "home"
    write_config(home, config(alpha, beta))
    proc = subprocess.run(
        [sys.executable, "-m", "olp", "providers", "reset", "ghost"],
        env={**os.environ, "OLP_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "unknown provider 'ghost'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_never_firing_soft_trigger_warns_at_start(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    home = tmp_path / "home"
    write_config(home, config(alpha, beta, {"five_hour_window_percent_threshold": 80}))
    with ProcessServer(home, {"ALPHA_KEY": "k"}) as server:
        server.terminate()
        assert server.proc is not None
        _, stderr = server.proc.communicate(timeout=15)
    assert "soft_trigger_never_fires" in stderr
    assert "five_hour_capacity" in stderr


def test_quota_endpoint_is_owner_only(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    cfg = config(alpha, beta)
    cfg["auth"] = {"allow_anonymous": True}
    with olp_server(tmp_path, cfg) as server:
        anonymous = httpx.get(f"{server.base_url}/v0/management/quota")
        assert anonymous.status_code == 403
        assert anonymous.json()["error"]["code"] == "owner_required"
        owner = httpx.get(f"{server.base_url}/v0/management/quota", headers=AUTH)
        assert owner.status_code == 200
        assert {p["provider"] for p in owner.json()["providers"]} == {"alpha", "beta"}
        assert quota_of(server, "beta")["state"] == "unknown"


def test_quota_saves_never_overlap_on_the_shared_connection(tmp_path: Path) -> None:
    # Saves that overlapped on quota.db's one connection failed with "cannot start a
    # transaction within a transaction"; at shutdown, the final save met the periodic one
    # its cancel had left running, and `olp start` printed a traceback.
    async def main() -> None:
        book = QuotaBook(Cooldowns(), {}, lambda _name: None)
        for i in range(50):
            book.on_attempt(f"p{i}", reached=True)
        sync = QuotaSync(book, QuotaStore(tmp_path / "quota.db"), interval_s=0.0)
        results = await asyncio.gather(*(sync.sync() for _ in range(30)), return_exceptions=True)
        assert results == [None] * 30
        sync.start()  # saving back to back, then shut down in the middle of one
        await asyncio.sleep(0.05)
        await sync.aclose()

    asyncio.run(main())
    state, saved_at = QuotaStore(tmp_path / "quota.db").load()
    assert len(state) == 50 and saved_at is not None


def test_a_saved_signal_keeps_its_five_hour_reset() -> None:
    clock = FakeClock()
    soft = {"alpha": {"five_hour_window_percent_threshold": 90.0}}
    signal = QuotaSnapshot(
        five_hour_utilisation=0.95, five_hour_reset_at=clock.now + 3600, reset_at=clock.now + 9e5
    )
    before = QuotaBook(Cooldowns(clock), soft, lambda _name: signal, clock)
    before.refresh("alpha")
    after = QuotaBook(Cooldowns(clock), soft, lambda _name: None, clock)  # a restart
    after.load(json.loads(json.dumps(before.dump())))
    status = after.status("alpha")
    assert status.state == "soft_limited"
    assert status.reset_at == clock.now + 3600
