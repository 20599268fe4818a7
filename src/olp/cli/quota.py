"""`olp quota` and `olp providers reset`: quota state as the server last saved it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import click
import orjson

from olp.cli.common import fail, load_or_exit
from olp.config import Config
from olp.engine import PoolScheduler
from olp.errors import OLPError
from olp.quota import Cooldowns, ProviderQuota, QuotaBook, QuotaStore
from olp.server.quota_api import pools_json, provider_quota_json

__all__ = ["providers", "quota", "saved_book"]


def _open_store(config: Config) -> QuotaStore:
    try:
        return QuotaStore(config.home / "quota.db")
    except OLPError as exc:
        fail(exc.message)


def saved_book(
    state: dict[str, dict[str, Any]], thresholds: Mapping[str, Mapping[str, float]]
) -> QuotaBook:
    """The quota book as the server last saved it (read-only: nothing here records)."""
    book = QuotaBook(Cooldowns(), thresholds, lambda _: None)
    book.load(state)
    return book


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
def quota(as_json: bool) -> None:
    """Show each provider's quota: state, counters, utilisation, reset time, sources,
    and each pool's members with the one its next request would take.

    \b
    States: ok, soft_limited (a soft trigger fires: OLP skips it), cooling_down (after a
    rate or quota limit, until the reset), unknown (no figures yet). The running server
    saves it within a second of each change; here you see the latest save.

    \b
    Examples:
      olp quota
      olp quota --json | jq '.providers[] | select(.state != "ok")'
    """
    config = load_or_exit(detect_local_servers=False)
    store = _open_store(config)
    state, saved = store.load()
    store.close()
    book = saved_book(state, config.routing.soft_triggers)
    rows = book.statuses(sorted(set(config.providers) | set(state)))
    enabled = [name for name, p in config.providers.items() if p.enabled]
    pools = pools_json(config, PoolScheduler(book), enabled, time.time())
    if as_json:
        payload = {
            "saved_at": saved,
            "providers": [provider_quota_json(q) for q in rows],
            "pools": pools,
        }
        click.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())
        return
    if not rows:
        click.echo(
            "no providers: none is configured or detected. "
            "Run `olp setup` to find your CLIs, API keys and local servers."
        )
        return
    click.echo(_table(rows))
    for pool in pools:
        click.echo(_pool_text(pool))
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(saved)) if saved else "never"
    click.echo(f"\nlast change saved by the server: {when}")


def _table(rows: list[ProviderQuota]) -> str:
    lines = [f"{'provider':<16} {'state':<13} {'today':>6} {'5h':>5} {'5h used':>14}  resets"]
    for q in rows:
        used = q.five_hour_utilisation
        used_text = f"{used.value:.0%} ({used.source})" if used.value is not None else "-"
        reset = _reset_text(q.reset_at, time.time())
        lines.append(
            f"{q.provider:<16} {q.state:<13} {q.requests_today:>6} "
            f"{q.five_hour_requests:>5} {used_text:>14}  {reset}"
        )
        for fired in q.fired:
            lines.append(f"{'':<16} soft trigger: {fired}")
        for c in q.cooldowns:
            scope = f"{q.provider}/{c.model}" if c.model else q.provider
            lines.append(f"{'':<16} cooling down: {scope} after {c.reason}: {c.message[:80]}")
    return "\n".join(lines)


def _pool_text(pool: dict[str, Any]) -> str:
    """A pool: its pick, the member the next request takes, each member's window."""
    lines = [f"\npool {pool['pool']} ({pool['pick']}): next request → {pool['next'] or 'none'}"]
    now = time.time()
    for member in pool["members"]:
        window = member["window"]
        if window is None:
            known = "window unknown" + ("" if member["heard_from"] else " (not tried yet)")
        else:
            used = window["utilisation"]
            used_text = f"{used:.0%} used" if used is not None else "use unknown"
            known = (
                f"{used_text}, resets {_reset_text(window['reset_at'], now)} ({window['source']})"
            )
        state = " [cooling down or soft-limited]" if member["blocked"] else ""
        state += "" if member["enabled"] else " [disabled]"
        lines.append(f"  {member['provider']:<16} {known}{state}")
    return "\n".join(lines)


def _reset_text(reset_at: float | None, now: float) -> str:
    """A time today as HH:MM UTC; on another day with its date (a daily limit: midnight)."""
    if not reset_at:
        return "-"
    same_day = time.gmtime(reset_at)[:3] == time.gmtime(now)[:3]
    return time.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC", time.gmtime(reset_at))


@click.group()
def providers() -> None:
    """Act on providers."""


@providers.command()
@click.argument("name")
def reset(name: str) -> None:
    """End NAME's cooldowns now (the running server applies it within seconds).

    \b
    Example:
      olp providers reset claude
    """
    config = load_or_exit(detect_local_servers=False)
    if name not in config.providers:
        known = ", ".join(sorted(config.providers)) or "none configured"
        fail(f"unknown provider {name!r} (configured: {known})")
    store = _open_store(config)
    state, _ = store.load()
    # Asked for even when the last save shows no cooldown: one may have begun since.
    store.request_reset(name)
    store.close()
    cooling = saved_book(state, config.routing.soft_triggers).statuses([name])[0].cooldowns
    if not cooling:
        click.echo(f"{name}: not cooling down; nothing to end")
        return
    scopes = ", ".join(f"{name}/{c.model}" if c.model else name for c in cooling)
    click.echo(
        f"{name}: ended {len(cooling)} cooldown(s) ({scopes}); "
        "a running server applies it within seconds"
    )
