"""Per-key limits with an injectable clock: each window, its reset, and the 429 on the wire."""

from __future__ import annotations

import calendar
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from olp.accounts.identity import Identity, KeyLimits
from olp.accounts.keystore import KeyStore, keys_db_path
from olp.accounts.limits import LimitKeeper, UsageSeed
from olp.errors import KeyLimitExceeded

from fakes.upstream import FakeUpstream, Hang, Text
from olp_server import OWNER_TOKEN, olp_server

# 2027-03-10 12:00:00.25 UTC: mid-day, mid-month, a quarter into a second.
NOON = calendar.timegm((2027, 3, 10, 12, 0, 0)) + 0.25
MIDNIGHT = calendar.timegm((2027, 3, 11, 0, 0, 0))


class FakeClock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def member(**limits: Any) -> Identity:
    return Identity(key_id="key_alice001", name="alice", tier="member", limits=KeyLimits(**limits))


def admit(keeper: LimitKeeper, who: Identity) -> None:
    keeper.admit(who)


def refused(keeper: LimitKeeper, who: Identity) -> KeyLimitExceeded:
    with pytest.raises(KeyLimitExceeded) as info:
        keeper.admit(who)
    assert info.value.code == "key_limit_exceeded"
    assert info.value.http_status == 429
    return info.value


def test_requests_per_minute_slide_and_free_with_the_oldest_second() -> None:
    clock = FakeClock()
    keeper = LimitKeeper(clock)
    alice = member(rpm=3)
    for offset in (0, 20, 40):
        clock.now = NOON + offset
        admit(keeper, alice)
    clock.now = NOON + 50
    err = refused(keeper, alice)
    # The first request (second 12:00:00) leaves the window at 12:01:00.
    assert err.retry_after == pytest.approx(int(NOON) + 60 - (NOON + 50))
    assert "3 requests per minute" in err.message
    clock.now = int(NOON) + 60  # exactly when that second drops out
    admit(keeper, alice)
    err = refused(keeper, alice)  # now 20, 40 and 60 are in the window
    assert err.retry_after == pytest.approx(20)


def test_requests_per_minute_waits_for_enough_old_requests_to_leave() -> None:
    clock = FakeClock()
    keeper = LimitKeeper(clock)
    alice = member(rpm=4)
    for offset in (0, 0, 10, 10):
        clock.now = NOON + offset
        admit(keeper, alice)
    # An owner lowers the limit to 2 while 4 requests are in the window: room for one
    # more only after 3 have left, i.e. after the second 12:00:10 has gone.
    alice = member(rpm=2)
    clock.now = NOON + 30
    assert refused(keeper, alice).retry_after == pytest.approx(int(NOON) + 70 - clock.now)


def test_requests_per_day_reset_at_utc_midnight() -> None:
    clock = FakeClock()
    keeper = LimitKeeper(clock)
    alice = member(rpd=2)
    admit(keeper, alice)
    clock.now += 3600
    admit(keeper, alice)
    err = refused(keeper, alice)
    assert err.retry_after == pytest.approx(MIDNIGHT - clock.now)
    assert "2 requests for today" in err.message and "00:00 UTC" in err.message
    clock.now = MIDNIGHT - 0.001
    refused(keeper, alice)
    clock.now = MIDNIGHT
    admit(keeper, alice)


def test_requests_per_7_days_roll_by_utc_day() -> None:
    clock = FakeClock()
    keeper = LimitKeeper(clock)
    alice = member(rp7d=3)
    for _ in range(2):
        admit(keeper, alice)  # day 0 (2027-03-10): two requests
    clock.now += 2 * 86_400
    admit(keeper, alice)  # day 2: the third
    err = refused(keeper, alice)
    assert "3 requests for the last 7 days" in err.message
    # Room comes back when day 0 leaves the window: at the start of its 7th day after.
    assert err.retry_after == pytest.approx(MIDNIGHT + 6 * 86_400 - clock.now)
    clock.now = MIDNIGHT + 6 * 86_400 - 0.001  # still within day 0's seventh day
    refused(keeper, alice)
    assert keeper.usage(alice.key_id).requests_7d == 3
    clock.now = MIDNIGHT + 6 * 86_400
    admit(keeper, alice)
    admit(keeper, alice)
    refused(keeper, alice)  # day 2's request and today's two


def test_requests_per_30_days_count_across_a_month_and_a_restart() -> None:
    clock = FakeClock()
    day = int(NOON // 86_400)
    keeper = LimitKeeper(clock)
    keeper.seed(
        [
            UsageSeed(
                "key_alice001",
                requests_today=1,
                # 29 days ago (the window's oldest), 10 days ago, and 30 days ago (outside).
                earlier_days=((day - 29, 4), (day - 10, 2), (day - 30, 50)),
            )
        ]
    )
    usage = keeper.usage("key_alice001")
    assert (usage.requests_today, usage.requests_7d, usage.requests_30d) == (1, 1, 7)
    refused(keeper, member(rp30d=7))
    keeper.admit(member(rp30d=8, rp7d=2))
    clock.now = MIDNIGHT  # the day 29 days ago leaves the window
    assert keeper.usage("key_alice001").requests_30d == 4


def test_tokens_per_day_count_after_the_answer() -> None:
    clock = FakeClock()
    keeper = LimitKeeper(clock)
    alice = member(tpd=1000)
    admit(keeper, alice)
    keeper.on_usage(alice.key_id, 600, 0.0)
    admit(keeper, alice)  # 600 < 1000: still room (the answer may overshoot)
    keeper.on_usage(alice.key_id, 450, 0.0)
    err = refused(keeper, alice)
    assert "1050 of its 1000 tokens" in err.message
    assert err.retry_after == pytest.approx(MIDNIGHT - NOON)
    clock.now = MIDNIGHT + 1
    admit(keeper, alice)
    assert keeper.usage(alice.key_id).tokens_today == 0


def test_usd_per_month_resets_on_the_first_even_across_the_year() -> None:
    clock = FakeClock(calendar.timegm((2027, 12, 31, 23, 0, 0)))
    keeper = LimitKeeper(clock)
    alice = member(usd_month=5.0)
    admit(keeper, alice)
    keeper.on_usage(alice.key_id, 10, 5.01)
    err = refused(keeper, alice)
    new_year = calendar.timegm((2028, 1, 1, 0, 0, 0))
    assert err.retry_after == pytest.approx(new_year - clock.now)
    assert "$5.01 of its $5.00" in err.message and "2028-01-01" in err.message
    clock.now = new_year
    admit(keeper, alice)


def test_when_several_limits_are_reached_the_latest_reset_wins() -> None:
    clock = FakeClock()
    keeper = LimitKeeper(clock)
    alice = member(rpm=1, rpd=1)
    admit(keeper, alice)
    err = refused(keeper, alice)
    assert err.retry_after == pytest.approx(MIDNIGHT - NOON)  # not the rpm's 60 s
    assert "requests for today" in err.message


def test_keys_without_limits_are_never_refused() -> None:
    keeper = LimitKeeper(FakeClock())
    owner = Identity(key_id="owner", name="owner", tier="owner")
    for _ in range(10_000):
        admit(keeper, owner)
    assert keeper.usage("owner").requests_today == 10_000
    # An owner key with limits set on it is limited like any other.
    limited_owner = Identity(
        key_id="owner", name="owner", tier="owner", limits=KeyLimits(rpd=10_000)
    )
    refused(keeper, limited_owner)


def test_seed_carries_counts_across_a_restart() -> None:
    clock = FakeClock()
    keeper = LimitKeeper(clock)
    keeper.seed(
        [
            UsageSeed(
                "key_alice001",
                requests_today=5,
                tokens_today=70,
                usd_month=1.5,
                recent_requests=(NOON - 10, NOON - 5, NOON - 120, NOON + 999),
            ),
        ]
    )
    usage = keeper.usage("key_alice001")
    assert (usage.requests_today, usage.tokens_today, usage.usd_month) == (5, 70, 1.5)
    assert usage.requests_last_minute == 2  # the stale and the future time are ignored
    refused(keeper, member(rpd=5))
    refused(keeper, member(rpm=2))
    refused(keeper, member(tpd=70))
    refused(keeper, member(usd_month=1.5))
    keeper.admit(member(rpd=6, rpm=3, tpd=71, usd_month=1.6))


def test_limit_over_http_is_429_with_retry_after(tmp_path: Path, upstream: FakeUpstream) -> None:
    home = tmp_path / "olp-home"
    store = KeyStore.open(keys_db_path(home))
    key = store.create("alice", limits=KeyLimits(rpm=2)).secret
    store.close()
    clock = FakeClock()
    config = {
        "providers": {
            "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
        },
    }

    def ask() -> dict[str, Any]:  # a new question each time: no cache hit hides a call
        return {"model": "m", "messages": [{"role": "user", "content": uuid.uuid4().hex}]}

    with olp_server(tmp_path, config, clock=clock) as olp:
        url = f"{olp.base_url}/v1/chat/completions"
        auth = {"authorization": f"Bearer {key}"}
        assert httpx.post(url, json=ask(), headers=auth).status_code == 200
        clock.now += 1
        assert httpx.post(url, json=ask(), headers=auth).status_code == 200
        clock.now += 10
        resp = httpx.post(url, json=ask(), headers=auth)
        assert resp.status_code == 429
        assert resp.json()["error"]["code"] == "key_limit_exceeded"
        assert resp.json()["error"]["type"] == "rate_limit_error"
        # First request at 12:00:00.25 leaves the window at 12:01:00; now 12:00:11.25.
        assert resp.headers["retry-after"] == "49"
        assert resp.headers["x-olp-request-id"].startswith("req_")
        owner = {"authorization": f"Bearer {OWNER_TOKEN}"}
        assert httpx.post(url, json=ask(), headers=owner).status_code == 200  # others unaffected
        clock.now = int(NOON) + 60
        assert httpx.post(url, json=ask(), headers=auth).status_code == 200
    assert upstream.calls == 4  # the refused request never reached a provider


def test_requests_at_once_hold_a_slot_until_released() -> None:
    keeper = LimitKeeper(FakeClock())
    alice = member(concurrent=2)
    for _ in range(2):
        assert keeper.admit(alice)  # a slot held: the caller must release it
    err = refused(keeper, alice)
    assert err.retry_after == 1.0  # nobody knows when one ends: ask again in a second
    assert "allows 2 requests at a time and 2 are in progress" in err.message
    assert keeper.usage(alice.key_id).in_progress == 2
    assert keeper.admit(member(concurrent=3))  # the owner raised the limit: room again
    for _ in range(3):
        keeper.release(alice.key_id)
    assert keeper.usage(alice.key_id).in_progress == 0
    assert keeper.admit(alice)  # every slot free again
    keeper.release(alice.key_id)
    # A slot free does not hide another limit: three requests today, rpd 3.
    assert "3 requests for today" in refused(keeper, member(concurrent=2, rpd=3)).message


def test_requests_at_once_over_http(tmp_path: Path, upstream: FakeUpstream) -> None:
    home = tmp_path / "olp-home"
    store = KeyStore.open(keys_db_path(home))
    key = store.create("kid", limits=KeyLimits(concurrent=1)).secret
    store.close()
    config = {
        "providers": {
            "up": {"type": "openai-http", "base_url": upstream.openai_base_url, "models": ["m"]}
        },
    }
    auth = {"authorization": f"Bearer {key}"}

    def ask(stream: bool = False) -> dict[str, Any]:
        content = uuid.uuid4().hex  # a new question each time: no cache hit, no shared call
        return {"model": "m", "messages": [{"role": "user", "content": content}], "stream": stream}

    with olp_server(tmp_path, config) as olp:
        url = f"{olp.base_url}/v1/chat/completions"

        def admitted() -> bool:
            time.sleep(0.05)  # (polled: a 429 until the slot is free)
            return httpx.post(url, json=ask(), headers=auth).status_code == 200

        upstream.script(Text("one two three four", chunks=4, delay_s=0.4))
        with httpx.stream("POST", url, json=ask(stream=True), headers=auth, timeout=10) as first:
            lines = first.iter_lines()  # (one iterator: a dropped one closes the response)
            next(lines)  # the first request is in progress
            resp = httpx.post(url, json=ask(), headers=auth)
            assert resp.status_code == 429
            assert resp.json()["error"]["code"] == "key_limit_exceeded"
            assert "1 request at a time and 1 is in progress" in resp.json()["error"]["message"]
            assert resp.headers["retry-after"] == "1"
            owner = {"authorization": f"Bearer {OWNER_TOKEN}"}
            assert httpx.post(url, json=ask(), headers=owner).status_code == 200
            assert "four" in "".join(lines)
        assert upstream.wait_for(admitted, timeout=5)  # it ended: its slot is free again

        upstream.script(Hang(30))  # a client that gives up mid-request frees its slot too
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=ask(), headers=auth, timeout=1)
        assert upstream.wait_for(admitted, timeout=10)
    assert upstream.calls == 5  # the refused requests never reached a provider
