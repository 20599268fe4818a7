"""`olp cache stats|clear`: the response cache under $OLP_HOME."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
import orjson

from olp.accounts.identity import ANONYMOUS, OWNER_TOKEN_IDENTITY
from olp.accounts.ledger_rows import LEDGER_FILE
from olp.accounts.usage_query import CacheOutcomes, cache_outcomes, iso, parse_since
from olp.cache.control import disk_stats, request_clear
from olp.cache.redis_keys import shared_clear, shared_stats
from olp.cli.common import existing_key_store, fail, load_or_exit, read_ledger
from olp.config import CacheConfig
from olp.errors import OLPError

__all__ = ["cache"]

# Namespaces of identities that are not rows in keys.db.
BUILTIN_NAMESPACES = frozenset({OWNER_TOKEN_IDENTITY.key_id, ANONYMOUS.key_id})


@click.group()
def cache() -> None:
    """Look at or clear OLP's response cache ($OLP_HOME/cache.db, or cache.redis_url)."""


@cache.command()
@click.option(
    "--since",
    default="7d",
    show_default=True,
    help="Count hits and misses from this time on: a duration (30m, 24h, 7d, 2w), "
    "'today', or a UTC date or time (2026-11-01).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
def stats(since: str, as_json: bool) -> None:
    """Stored answers per namespace (one per OLP key), and each key's hit rate.

    Entries and bytes are what the cache file (or the shared Redis) holds now. Hits,
    misses and bypasses count the key's answered requests since --since, from the usage
    ledger, so they survive restarts; the hit rate is hits / (hits + misses). For the
    running server's own counters since it started, in-flight calls included, see
    GET /cache/stats.

    \b
    Examples:
      olp cache stats
      olp cache stats --since today --json
    """
    config = load_or_exit(detect_local_servers=False)
    now = time.time()
    try:
        start = parse_since(since, now)
    except ValueError as exc:
        fail(f"--since: {exc}")
    shared = config.cache.redis_url
    try:
        if shared is not None:
            stored = shared_stats(shared, config.cache.redis_prefix)
        else:
            stored = disk_stats(config.home)
    except OLPError as exc:
        fail(exc.message)
    ledger = config.home / LEDGER_FILE
    outcomes = read_ledger(ledger, lambda c: cache_outcomes(c, start)) if ledger.exists() else []
    figures = {"store": "redis" if shared else "sqlite", **_figures(stored, outcomes, start)}
    if as_json:
        click.echo(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(_table(figures))


_COUNTS = ("hits", "misses", "bypasses")


def _figures(stored: dict[str, Any], outcomes: list[CacheOutcomes], since: float) -> dict[str, Any]:
    """The file's entries and bytes beside the ledger's counts, per namespace and in all."""
    per: dict[str, dict[str, Any]] = {}
    for namespace, row in stored["namespaces"].items():
        per[namespace] = {"name": "", **row, **dict.fromkeys(_COUNTS, 0)}
    for o in outcomes:
        row = per.setdefault(o.key_id, {"name": "", "entries": 0, "bytes": 0})
        row.update(name=o.key_name, hits=o.hits, misses=o.misses, bypasses=o.bypasses)
    totals = {name: sum(row[name] for row in per.values()) for name in _COUNTS}
    for row in per.values():
        row["hit_rate"] = _rate(row["hits"], row["misses"])
    return {
        "since": iso(since),
        "entries": stored["entries"],
        "bytes": stored["bytes"],
        **totals,
        "hit_rate": _rate(totals["hits"], totals["misses"]),
        "namespaces": dict(sorted(per.items())),
    }


def _rate(hits: int, misses: int) -> float | None:
    return round(hits / (hits + misses), 4) if hits + misses else None


def _table(figures: dict[str, Any]) -> str:
    def line(namespace: str, row: dict[str, Any]) -> str:
        rate = "-" if row["hit_rate"] is None else f"{row['hit_rate']:.0%}"
        return (
            f"{namespace:<16} {row['name'][:14]:<14} {row['entries']:>8} {row['bytes']:>12} "
            f"{row['hits']:>8} {row['misses']:>8} {row['bypasses']:>8} {rate:>8}"
        )

    head = (
        f"{'namespace':<16} {'name':<14} {'entries':>8} {'bytes':>12} "
        f"{'hits':>8} {'misses':>8} {'bypassed':>8} {'hit rate':>8}"
    )
    rows = [line(ns, row) for ns, row in figures["namespaces"].items()]
    total = line("total", {**figures, "name": ""})
    where = "the shared cache (Redis)" if figures["store"] == "redis" else "the cache file"
    note = (
        f"entries and bytes: {where} now; hits, misses and bypasses: answered "
        f"requests since {figures['since']} (the usage ledger)"
    )
    return "\n".join([head, *rows, total, "", note])


@cache.command()
@click.option(
    "--key",
    "key",
    metavar="KEY",
    help="Clear only this key's namespace: a key's id or name from `olp keys list`, "
    "or `owner` (the owner token) or `anonymous`.",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def clear(key: str | None, yes: bool) -> None:
    """Delete stored answers: one key's, or everyone's. A running server (every replica,
    with a shared cache) follows within a second.

    \b
    Examples:
      olp cache clear --yes
      olp cache clear --key alice
      olp cache clear --key key_ab12cd34
    """
    config = load_or_exit(detect_local_servers=False)
    shared = config.cache.redis_url
    namespace = None if key is None else _namespace(config.home, key, config.cache)
    what = f"namespace {namespace}" if namespace else "every namespace"
    if namespace is not None and namespace != key:
        what += f" (key {key})"
    if not yes:
        click.confirm(f"Clear the cache of {what}?", abort=True)
    try:
        if shared is not None:
            cleared = shared_clear(shared, config.cache.redis_prefix, namespace)
        else:
            cleared = request_clear(config.home, namespace)
    except OLPError as exc:
        fail(exc.message)
    click.echo(f"cleared {cleared} stored answer(s) from {what}")


def _namespace(home: Path, ref: str, config: CacheConfig) -> str:
    """The namespace of `ref`: a key's id or name, a built-in identity, or a stored namespace.

    A name that matches nothing must not clear nothing and say "cleared 0": that reads as
    success. It is an error that says where the names are.
    """
    if ref in BUILTIN_NAMESPACES:
        return ref
    key_id = _key_id(home, ref)
    if key_id is not None:
        return key_id
    try:
        shared = config.redis_url
        stored = shared_stats(shared, config.redis_prefix) if shared else disk_stats(home)
    except OLPError as exc:
        fail(exc.message)
    if ref not in stored["namespaces"]:
        fail(
            f"--key {ref}: no key has this id or name, and the cache holds no namespace of "
            "that name. `olp keys list` shows the keys; `olp cache stats` the namespaces."
        )
    return ref  # a namespace whose key is no longer in keys.db


def _key_id(home: Path, ref: str) -> str | None:
    """The id of the key `ref` names (an id or a name) in keys.db; None if none does."""
    with existing_key_store(home) as store:
        if store is None:
            return None
        try:
            return store.get(ref).id
        except OLPError as exc:
            if exc.code != "key_not_found":
                fail(exc.message)
            return None
