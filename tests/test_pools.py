"""Pool hops end to end: two Anthropic-speaking fake upstreams (two accounts of one kind)
that send their 5-hour window on every answer, a real OLP, the pool's pick order."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from click.testing import CliRunner
from jsonschema import Draft202012Validator
from playwright.sync_api import sync_playwright

from olp.accounts.keystore import KeyStore, keys_db_path
from olp.cli import cli
from olp.config import ConfigProblems, load_config

from fakes.upstream import FakeUpstream, Status, Text
from olp_server import (
    OWNER_TOKEN,
    ProcessServer,
    ThreadServer,
    eventually,
    olp_server,
    server_env,
    write_config,
)

TIMEOUTS = {"connect_ms": 500, "first_byte_ms": 2000, "idle_ms": 2000, "total_ms": 5000}


def window(used: float, resets_in_s: float) -> Text:
    """An answer whose headers carry the account's 5-hour window."""
    return Text(
        "ok",
        headers={
            "anthropic-ratelimit-unified-5h-utilization": f"{used}",
            "anthropic-ratelimit-unified-5h-reset": f"{int(time.time() + resets_in_s)}",
        },
    )


def pool_config(me: FakeUpstream, partner: FakeUpstream, pick: str | None = None) -> dict[str, Any]:
    hop: dict[str, Any] = {"pool": ["claude-me", "claude-partner"], "model": "claude-sonnet-4-5"}
    if pick is not None:
        hop["pick"] = pick
    return {
        "providers": {
            "claude-me": {"type": "anthropic-http", "base_url": me.base_url, "timeouts": TIMEOUTS},
            "claude-partner": {
                "type": "anthropic-http",
                "base_url": partner.base_url,
                "timeouts": TIMEOUTS,
            },
        },
        "routing": {"chains": {"sonnet": [hop]}},
        "cache": {"enabled": False},  # every request must reach the pool
    }


def ask(server: ThreadServer) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "sonnet", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        timeout=10,
    )


@pytest.fixture
def olp_pool(tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream) -> Iterator[ThreadServer]:
    with olp_server(tmp_path, pool_config(alpha, beta)) as server:
        yield server


def test_reset_soonest_spends_the_window_about_to_reset(
    olp_pool: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    alpha.script(*[window(0.2, 4 * 3600)] * 10)  # claude-me: resets in 4 h
    beta.script(*[window(0.6, 20 * 60)] * 10)  # claude-partner: resets in 20 min
    # Neither window is known yet: each account is tried once so that OLP learns it.
    learned = {ask(olp_pool).headers["x-olp-provider-used"] for _ in range(2)}
    assert learned == {"claude-me", "claude-partner"}
    used = [ask(olp_pool).headers["x-olp-provider-used"] for _ in range(5)]
    assert used == ["claude-partner"] * 5
    assert (alpha.calls, beta.calls) == (1, 6)

    status = httpx.get(
        f"{olp_pool.base_url}/v0/management/status",
        headers={"authorization": f"Bearer {OWNER_TOKEN}"},
    ).json()
    spec = yaml.safe_load((Path(__file__).parents[1] / "docs/openapi.yaml").read_text())
    Draft202012Validator({**spec, "$ref": "#/components/schemas/Status"}).validate(status)
    (pool,) = status["pools"]
    assert pool["pool"] == "sonnet[0]" and pool["pick"] == "reset-soonest"
    assert pool["next"] == "claude-partner"
    members = {m["provider"]: m for m in pool["members"]}
    assert members["claude-partner"]["window"]["utilisation"] == pytest.approx(0.6)
    assert 0 < members["claude-partner"]["window"]["resets_in_s"] <= 20 * 60
    assert members["claude-me"]["window"]["source"] == "headers"


def test_a_limited_member_is_stepped_over_within_the_request_and_kept_cooling(
    olp_pool: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    alpha.script(window(0.2, 4 * 3600))
    beta.script(window(0.6, 20 * 60))
    for _ in range(2):  # learn both windows
        assert ask(olp_pool).status_code == 200
    beta.script(Status(429, headers={"retry-after": "600"}))
    alpha.script(*[window(0.25, 4 * 3600)] * 5)
    resp = ask(olp_pool)
    assert resp.status_code == 200
    assert resp.headers["x-olp-provider-used"] == "claude-me"
    assert resp.headers["x-olp-fallback-hops"] == "1"  # the second member of the pool
    # claude-partner cools down: the next requests go straight to claude-me.
    before = beta.calls
    used = [ask(olp_pool).headers["x-olp-provider-used"] for _ in range(3)]
    assert used == ["claude-me"] * 3
    assert beta.calls == before


def test_round_robin_spreads_requests_evenly(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    with olp_server(tmp_path, pool_config(alpha, beta, "round-robin")) as server:
        used = [ask(server).headers["x-olp-provider-used"] for _ in range(6)]
    assert used.count("claude-me") == 3 and used.count("claude-partner") == 3
    assert used[0] != used[1]


def test_fill_first_keeps_to_the_first_member_until_it_fails(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    with olp_server(tmp_path, pool_config(alpha, beta, "fill-first")) as server:
        used = [ask(server).headers["x-olp-provider-used"] for _ in range(3)]
        assert used == ["claude-me"] * 3
        alpha.script(Status(529))  # overloaded: the pool steps to its second member
        assert ask(server).headers["x-olp-provider-used"] == "claude-partner"


@pytest.mark.parametrize(
    ("hop", "message"),
    [
        ({"pool": ["a", "nope"]}, "unknown provider 'nope'"),
        ({"pool": ["a", "a"]}, "names a provider twice"),
        ({"pool": ["a", "o"]}, "members must be of one provider type"),
        ({"pool": []}, "at least one provider"),
        ({"pool": ["a", "b"], "pick": "random"}, "must be one of reset-soonest"),
        ({"pool": ["a", "b"], "provider": "a"}, 'either "provider" or "pool"'),
    ],
)
def test_bad_pools_are_config_errors(tmp_path: Path, hop: dict[str, Any], message: str) -> None:
    anthropic = {"type": "anthropic-http", "base_url": "http://127.0.0.1:9"}
    config = {
        "providers": {
            "a": anthropic,
            "b": anthropic,
            "o": {"type": "openai-http", "base_url": "http://127.0.0.1:9/v1"},
        },
        "routing": {"chains": {"m": [hop]}},
    }
    write_config(tmp_path, config)
    with pytest.raises(ConfigProblems) as info:
        load_config(server_env(tmp_path), detect_local_servers=False)
    text = str(info.value)
    assert "routing.chains.m[0].pool" in text or "routing.chains.m[0]" in text
    assert message in text


def test_olp_quota_shows_each_pool_and_its_next_member(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    alpha.script(window(0.2, 4 * 3600))
    beta.script(window(0.6, 20 * 60))
    home = tmp_path / "olp-home"
    with olp_server(tmp_path, pool_config(alpha, beta)) as server:
        for _ in range(2):
            assert ask(server).status_code == 200

        def saved() -> Any:
            result = CliRunner().invoke(cli, ["quota", "--json"], env=server_env(home))
            return orjson.loads(result.output)["pools"]

        assert eventually(lambda: saved()[0]["next"] == "claude-partner")
    text = CliRunner().invoke(cli, ["quota"], env=server_env(home)).output
    assert "pool sonnet[0] (reset-soonest): next request → claude-partner" in text
    assert "60% used, resets" in text and "(headers)" in text


def test_a_cli_member_logs_in_from_its_own_credentials_home(tmp_path: Path) -> None:
    """A second account of one CLI: `credentials_home` is where its login lives."""
    config = {
        "providers": {
            "claude-me": {"type": "claude-cli"},
            "claude-partner": {"type": "claude-cli", "credentials_home": "~/accounts/partner"},
            "claude-abs": {"type": "claude-cli", "credentials_home": str(tmp_path / "abs")},
        },
        "routing": {"chains": {"sonnet": [{"pool": ["claude-me", "claude-partner"]}]}},
    }
    write_config(tmp_path, config)
    env = {**server_env(tmp_path), "HOME": "/home/owner"}
    loaded = load_config(env, detect_local_servers=False)
    homes = {name: p.user_home for name, p in loaded.providers.items()}
    assert homes == {
        "claude-me": Path("/home/owner"),
        "claude-partner": Path("/home/owner/accounts/partner"),
        "claude-abs": tmp_path / "abs",
    }
    pool_hops = loaded.routing.chains["sonnet"]
    assert [h.provider for h in pool_hops] == ["claude-me", "claude-partner"]
    assert pool_hops[0].pool is pool_hops[1].pool and pool_hops[0].model == "sonnet"

    config["providers"]["claude-abs"]["credentials_home"] = "relative/dir"  # type: ignore[index]
    write_config(tmp_path, config)
    with pytest.raises(ConfigProblems, match="must be an absolute path or start with ~/"):
        load_config(env, detect_local_servers=False)


def test_the_dashboard_shows_each_pool_and_its_next_member(
    olp_pool: ThreadServer, alpha: FakeUpstream, beta: FakeUpstream, tmp_path: Path
) -> None:
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("Debian's chromium is not installed: apt-get install -y chromium")
    alpha.script(window(0.2, 4 * 3600))
    beta.script(window(0.6, 20 * 60))
    for _ in range(2):
        assert ask(olp_pool).status_code == 200
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(chromium), args=args, headless=True
        )
        try:
            page = context.new_page()
            page.goto(f"{olp_pool.base_url}/dashboard#key={OWNER_TOKEN}")
            page.wait_for_selector("#main:not([hidden])")
            card = '[data-pool="sonnet[0]"]'
            assert page.text_content(f"{card} .badge.next") == "next: claude-partner"
            partner = f'{card} [data-member="claude-partner"]'
            assert page.get_attribute(partner, "class") == "pool-member next"
            assert page.text_content(f"{partner} .bar-value") == "60%"
            assert "resets in" in (page.text_content(f"{partner} .small") or "")
        finally:
            context.close()


def test_a_reload_keeps_pools_ordered_and_shares_gated(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    """A reload swaps the engine in a new snapshot: the pool order and the keys' share
    gate must come with it."""
    home = tmp_path / "home"
    write_config(home, pool_config(alpha, beta, "fill-first"))
    store = KeyStore.open(keys_db_path(home))
    try:
        kid = store.create("kid", shares=(("claude-me", 0.25),)).secret
    finally:
        store.close()

    def used(key: str = OWNER_TOKEN) -> str:
        resp = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"model": "sonnet", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {key}"},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        return resp.headers["x-olp-provider-used"]

    def reloads() -> int:
        resp = httpx.get(
            f"{server.base_url}/v0/management/status",
            headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        )
        return int(resp.json()["config"]["reloads"])

    def kid_spent() -> bool:
        resp = httpx.get(
            f"{server.base_url}/v0/management/quota",
            headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        )
        return any(share["spent"] for share in resp.json()["shares"])

    with ProcessServer(home) as server:
        write_config(home, pool_config(alpha, beta, "round-robin"))
        assert eventually(lambda: reloads() == 1, 10)
        # claude-me reports its window half used, all of it by kid's one request there.
        # (Several: the status page's health checks may take the first answers.)
        alpha.script(*[window(0.5, 3600)] * 4)
        assert "claude-me" in (used(kid), used(kid))
        # (A request is counted just after its answer went out.)
        assert eventually(kid_spent, 10)
        # Past its share: round-robin would give claude-me one of these two.
        assert [used(kid), used(kid)] == ["claude-partner", "claude-partner"]
        owner = [used() for _ in range(4)]
        assert owner.count("claude-me") == 2 and owner[0] != owner[1]
