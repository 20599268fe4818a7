"""A key's share of a provider's window, end to end: a real OLP, an Anthropic-speaking fake
upstream that reports its 5-hour window on every answer, a member key with a 25 % share."""

from __future__ import annotations

import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner

from olp.accounts.keystore import KeyStore, keys_db_path
from olp.accounts.shares import WindowUse
from olp.cli import cli

from fakes.upstream import FakeUpstream, Text
from olp_server import OWNER_TOKEN, ThreadServer, eventually, olp_server, server_env

RESET_IN_S = 2 * 3600


def window(used: float) -> Text:
    return Text(
        "ok",
        usage={"input_tokens": 10, "output_tokens": 10},
        headers={
            "anthropic-ratelimit-unified-5h-utilization": f"{used}",
            "anthropic-ratelimit-unified-5h-reset": f"{int(time.time() + RESET_IN_S)}",
        },
    )


def config(claude: FakeUpstream, backup: FakeUpstream | None) -> dict[str, Any]:
    hops = [{"provider": "claude-me", "model": "claude-sonnet-4-5"}]
    providers: dict[str, Any] = {
        "claude-me": {"type": "anthropic-http", "base_url": claude.base_url}
    }
    if backup is not None:
        providers["backup"] = {"type": "openai-http", "base_url": backup.openai_base_url}
        hops.append({"provider": "backup", "model": "gpt-4o-mini"})
    return {
        "providers": providers,
        "routing": {"chains": {"sonnet": hops}},
        "auth": {"fallback_detail_header_policy": "all"},
        "cache": {"enabled": False},
    }


def kid_key(home: Path) -> str:
    store = KeyStore.open(keys_db_path(home))
    try:
        return store.create("kid", shares=(("claude-me", 0.25),)).secret
    finally:
        store.close()


def ask(server: ThreadServer, key: str) -> httpx.Response:
    body = {"model": "sonnet", "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}"},
        timeout=10,
    )


def test_a_spent_share_steps_over_the_provider_for_that_key_only(
    tmp_path: Path, alpha: FakeUpstream, beta: FakeUpstream
) -> None:
    home = tmp_path / "olp-home"
    home.mkdir()
    kid = kid_key(home)
    alpha.script(window(0.2), window(0.3), window(0.35))
    with olp_server(tmp_path, config(alpha, beta)) as server:
        # 20 % of the window used, all of it kid's: under the 25 % share.
        assert ask(server, kid).headers["x-olp-provider-used"] == "claude-me"
        # Now 30 %: kid passed its share (the answer was already on its way).
        assert ask(server, kid).headers["x-olp-provider-used"] == "claude-me"
        stepped = ask(server, kid)
        assert stepped.status_code == 200
        assert stepped.headers["x-olp-provider-used"] == "backup"
        (skip,) = orjson.loads(stepped.headers["x-olp-fallback-detail"])
        assert skip["provider"] == "claude-me" and skip["code"] == "SHARE_SPENT"
        assert "kid: 30% of 25% of claude-me's window" in skip["message"]
        # The owner has no share: claude-me still answers it.
        assert ask(server, OWNER_TOKEN).headers["x-olp-provider-used"] == "claude-me"
        assert alpha.calls == 3

        quota = httpx.get(
            f"{server.base_url}/v0/management/quota",
            headers={"authorization": f"Bearer {OWNER_TOKEN}"},
        ).json()
        (share,) = quota["shares"]
        assert share["key_name"] == "kid" and share["provider"] == "claude-me"
        # The owner's request took a third of the window's tokens: kid's part is now two
        # thirds of 35 %, under its share again.
        assert share["used"] == pytest.approx(0.35 * 2 / 3, abs=0.01)
        assert share["share"] == 0.25 and share["spent"] is False

        def listed() -> str:
            result = CliRunner().invoke(cli, ["keys", "list"], env=server_env(home))
            return result.output

        assert eventually(lambda: "claude-me 23% of 25%" in listed())


def test_with_no_other_hop_a_spent_share_is_a_key_limit_until_the_window_resets(
    tmp_path: Path, alpha: FakeUpstream
) -> None:
    home = tmp_path / "olp-home"
    home.mkdir()
    kid = kid_key(home)
    alpha.script(window(0.5))
    with olp_server(tmp_path, config(alpha, None)) as server:
        assert ask(server, kid).status_code == 200
        refused = ask(server, kid)
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "key_limit_exceeded"
        assert RESET_IN_S - 60 <= int(refused.headers["retry-after"]) <= RESET_IN_S
        assert alpha.calls == 1  # refused without asking the provider
        assert ask(server, OWNER_TOKEN).status_code == 200


def test_a_busy_window_costs_a_tally_per_key_and_minute_not_a_row_per_request() -> None:
    """Five hours of a busy provider's requests must not pile up in memory (nor make each
    share check walk them all): 100,000 requests in ten minutes stay a few kilobytes."""
    use = WindowUse()
    start = 1_800_000_000.0
    use.record("claude-me", "warmup", 1, start - 1)  # the provider's queue exists already
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100_000):
            use.record("claude-me", f"key{i % 4}", 20, start + i * 0.006)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 200_000, f"{grown} bytes for 100,000 requests"
    assert use.portion("claude-me", "key1", start - 60, start + 600) == pytest.approx(0.25, 0.01)


def test_a_keys_part_weighs_answers_without_counts_as_the_average_one() -> None:
    use = WindowUse()
    now = 1_800_000_000.0
    use.record("claude-me", "kid", 300, now - 3600)
    use.record("claude-me", "owner", 100, now - 1800)
    use.record("claude-me", "kid", None, now - 60)  # weighs the average: 200
    assert use.portion("claude-me", "kid", now - 7200, now) == pytest.approx(500 / 600)
    # Before the window began, or older than five hours: not counted.
    assert use.portion("claude-me", "kid", now - 1800, now) == pytest.approx(100 / 200)
    assert use.portion("claude-me", "kid", now - 7200, now + 5 * 3600 - 1000) == 1.0
    assert use.portion("nobody", "kid", now - 7200, now) == 0.0
