"""`olp keys`: create, list, revoke, rotate and change API keys ($OLP_HOME/keys.db).

Works whether or not the server runs: the server notices every change on its next
request. Does not need a valid config.json (only OLP_HOME), so a broken config never
locks the owner out of key management.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import click
import orjson

from olp.accounts.identity import KeyLimits
from olp.accounts.keyrecord import KeyRecord, Patterns
from olp.accounts.keystore import KEEP, KeyStore, NewKey, keys_db_path
from olp.accounts.ledger_rows import LEDGER_FILE
from olp.accounts.shares import WINDOW_S, WindowUse
from olp.accounts.usage_query import read_window_rows
from olp.cli.common import client_base_url, fail
from olp.cli.key_options import (
    ExpiryArg,
    LimitArg,
    ShareArg,
    changed_expiry,
    changed_limits,
    new_expiry,
    new_limits,
    setting_options,
)
from olp.cli.quota import saved_book
from olp.config import load_config, olp_home
from olp.errors import ConfigError, OLPError
from olp.quota import QuotaStore
from olp.server.share_gate import shares_json

__all__ = ["keys_group"]


@click.group("keys")
def keys_group() -> None:
    """Manage API keys: one per person or app, each with its own limits and models.

    \b
    Keys live in $OLP_HOME/keys.db, stored only as SHA-256 hashes; a new key is shown
    once. Changes take effect on the running server's next request.

    \b
    Examples:
      olp keys create --name alice --models 'gpt-*,sonnet' --rpm 20 --usd-month 10
      olp keys list
      olp keys set alice --rpm none --rpd 500
      olp keys rotate alice
      olp keys revoke alice
    """


@keys_group.command("create")
@click.option("--name", required=True, help="Who or what the key is for (unique).")
@click.option(
    "--tier",
    type=click.Choice(["member", "owner"]),
    default="member",
    show_default=True,
    help="owner: may use owner endpoints (dashboard, management).",
)
@setting_options
@click.option("--json", "as_json", is_flag=True, help='Print {"id","key","name","tier"} only.')
def create(
    name: str,
    tier: str,
    models: tuple[str, ...],
    providers: tuple[str, ...],
    expires: ExpiryArg,
    shares: tuple[ShareArg, ...],
    as_json: bool,
    **limit_args: LimitArg,
) -> None:
    """Create a key and print it once.

    \b
    Examples:
      olp keys create --name alice
      olp keys create --name ci --models 'gpt-4o-mini' --rpd 1000 --json
      olp keys create --name laptop --tier owner
      olp keys create --name kid --rpd 200 --concurrent 2
      olp keys create --name guest --expires 7d
      olp keys create --name kid --share claude-me=0.25
    """
    with _store() as store:
        new = store.create(
            name,
            tier=tier,
            allowed_models=_patterns(models),
            allowed_providers=_patterns(providers),
            limits=new_limits(limit_args),
            expires_at=new_expiry(expires),
            shares=tuple((p, s) for p, s in shares if s is not None),
        )
    if as_json:
        r = new.record
        click.echo(orjson.dumps({"id": r.id, "key": new.secret, "name": r.name, "tier": r.tier}))
        return
    _show_secret(new, f'Created key {new.record.id} for "{new.record.name}" ({new.record.tier}).')
    _unknown_share_note(new.record)


@keys_group.command("list")
@click.option("--active", is_flag=True, help="Hide revoked keys.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a table.")
def list_keys(active: bool, as_json: bool) -> None:
    """List keys with their tier, limits, allow-lists, shares and last use (never the
    secret).

    A share shows how much of the provider's current window the key has used, from the
    ledger and the quota state the server saved (docs/keys.md). Last use is written by
    the running server about every 30 s, so it may lag that much.
    """
    with _store() as store:
        records = store.list_keys(include_revoked=not active)
    shares = _share_view(records)
    if as_json:
        payload = {"keys": [{**r.public(), "shares": shares(r)} for r in records]}
        click.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())
    elif not records:
        click.echo("No keys yet. Create one: olp keys create --name NAME")
    else:
        click.echo(_table(records, shares))


@keys_group.command("revoke")
@click.argument("key")
def revoke(key: str) -> None:
    """Revoke KEY (an id or a name): it stops working on the server's next request."""
    with _store() as store:
        before = store.get(key)
        record = store.revoke(key)
    if before.revoked:
        click.echo(
            f"Key {record.id} ({record.name}) was already revoked {_when(before.revoked_at)}."
        )
    else:
        click.echo(f"Revoked key {record.id} ({record.name}).")


@keys_group.command("rotate")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help='Print {"id","key","name","tier"} only.')
def rotate(key: str, as_json: bool) -> None:
    """Give KEY a new secret (same id, name and settings); the old secret stops working."""
    with _store() as store:
        new = store.rotate(key)
    if as_json:
        r = new.record
        click.echo(orjson.dumps({"id": r.id, "key": new.secret, "name": r.name, "tier": r.tier}))
        return
    _show_secret(
        new, f"New secret for key {new.record.id} ({new.record.name}); the old one no longer works."
    )


@keys_group.command("set")
@click.argument("key")
@setting_options
@click.option("--name", "new_name", help="Rename the key.")
def set_(
    key: str,
    models: tuple[str, ...],
    providers: tuple[str, ...],
    expires: ExpiryArg,
    shares: tuple[ShareArg, ...],
    new_name: str | None,
    **limit_args: LimitArg,
) -> None:
    """Change KEY's limits, allow-lists, expiry or name; what you do not mention stays.

    \b
    Examples:
      olp keys set alice --rpm 30 --usd-month 20
      olp keys set alice --rpm none            remove the per-minute limit
      olp keys set alice --models '*'          allow every model again
      olp keys set key_ab12cd34 --name bob
      olp keys set guest --expires 2027-01-31  works through that day (UTC)
      olp keys set kid --share claude-me=25%   a quarter of claude-me's window
    """
    given = [v for v in (*limit_args.values(), expires, new_name, *shares) if v is not None]
    if not models and not providers and not given:
        raise click.UsageError("nothing to change: give at least one option (see --help)")
    with _store() as store:
        record = store.update(
            key,
            name=KEEP if new_name is None else new_name,
            **changed_limits(limit_args),
            allowed_models=_patterns(models) if models else KEEP,
            allowed_providers=_patterns(providers) if providers else KEEP,
            expires_at=changed_expiry(expires),
            shares=dict(shares),
        )
    click.echo(f"Updated key {record.id} ({record.name}): {_settings(record)}")
    _unknown_share_note(record)
    if limit_args["usd_month"] is not None:
        _budget_note(record)


# -- helpers ----------------------------------------------------------------------------


@contextmanager
def _store() -> Iterator[KeyStore]:
    """The key store; any OLP error (bad input, unknown key, damaged file) exits 2."""
    path = keys_db_path(olp_home(os.environ))
    try:
        store = KeyStore.open(path)
    except OLPError as exc:
        fail(exc.message)
    try:
        yield store
    except OLPError as exc:
        fail(exc.message, hint=_hint(exc))
    finally:
        store.close()


def _hint(exc: OLPError) -> str | None:
    if exc.code == "key_not_found":
        return "olp keys list shows every key's id and name"
    return None


def _patterns(values: tuple[str, ...]) -> Patterns:
    """('a,b', 'c') -> ('a', 'b', 'c'); nothing given -> None (everything)."""
    if not values:
        return None
    return tuple(part for value in values for part in value.split(","))


def _show_secret(new: NewKey, headline: str) -> None:
    base_url = _base_url()
    click.echo(
        f"{headline}\n\n    {new.secret}\n\n"
        "This is the only time it is shown: OLP keeps only its SHA-256 hash.\n"
        "Use it as an OpenAI API key:\n"
        f"    export OPENAI_BASE_URL={base_url}\n"
        f"    export OPENAI_API_KEY={new.secret}\n"
        f"Settings: {_settings(new.record)}"
    )
    _budget_note(new.record)
    if new.record.expired(time.time()):  # (a rotated key keeps its expiry)
        click.echo(
            "This key has expired and is refused until you extend it: "
            f"olp keys set {new.record.id} --expires 30d"
        )


def _unknown_share_note(record: KeyRecord) -> None:
    """A share of a provider config.json does not have does nothing: say so."""
    if not record.shares:
        return
    try:
        configured = load_config(detect_local_servers=False).providers
    except ConfigError:
        return  # `olp config check` reports a broken file; the share is stored either way
    for provider, _ in record.shares:
        if provider not in configured:
            click.echo(
                f"note: no provider named {provider!r} is configured, so this share does "
                "nothing until one is (`olp config check` lists the providers)"
            )


def _budget_note(record: KeyRecord) -> None:
    if record.limits.usd_month is not None:
        click.echo(
            "With a USD budget the key only uses models OLP can price; "
            "`olp config check` marks the others with *."
        )


def _base_url() -> str:
    try:
        server = load_config(detect_local_servers=False).server
    except ConfigError:
        return "http://127.0.0.1:3456/v1"
    return client_base_url(server.host, server.port)


def _settings(record: KeyRecord) -> str:
    shares = ", ".join(f"{p} {s:.0%}" for p, s in record.shares) or "none"
    return (
        f"limits {_limits(record.limits)}; models {_list(record.allowed_models)}; "
        f"providers {_list(record.allowed_providers)}; shares {shares}; "
        f"expires {_when(record.expires_at)}"
    )


def _limits(limits: KeyLimits) -> str:
    parts = [
        f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}"
        for name, value in (
            ("rpm", limits.rpm),
            ("rpd", limits.rpd),
            ("rp7d", limits.rp7d),
            ("rp30d", limits.rp30d),
            ("tpd", limits.tpd),
            ("usd/month", limits.usd_month),
            ("concurrent", limits.concurrent),
        )
        if value is not None
    ]
    return ", ".join(parts) if parts else "none"


def _shares_text(shares: list[dict[str, Any]]) -> str:
    parts = []
    for s in shares:
        used = "" if s["used"] is None else f"{s['used']:.0%} of "
        parts.append(f"{s['provider']} {used}{s['share']:.0%}")
    return ", ".join(parts) or "-"


def _list(patterns: Patterns) -> str:
    return "*" if patterns is None else ",".join(patterns)


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts)) if ts else "never"


def _status(record: KeyRecord, now: float) -> str:
    if record.revoked:
        return "revoked"
    return "expired" if record.expired(now) else "active"


ShareView = Callable[[KeyRecord], list[dict[str, Any]]]


def _share_view(records: list[KeyRecord]) -> ShareView:
    """Each key's shares with the part of the window it used, as the server would show
    them, from the ledger's last five hours and the quota state the server last saved."""
    if not any(r.shares for r in records):
        return lambda record: []
    home = olp_home(os.environ)
    now = time.time()
    state: dict[str, dict[str, Any]] = {}
    if (home / "quota.db").exists():
        with suppress(OLPError):  # a damaged quota file: listed without their use
            store = QuotaStore(home / "quota.db")
            try:
                state = store.load()[0]
            finally:
                store.close()
    book = saved_book(state, {})
    use = WindowUse()
    # A damaged or locked ledger: the shares are listed without their use.
    with suppress(OLPError, sqlite3.Error):
        use.seed(read_window_rows(home / LEDGER_FILE, now - WINDOW_S, now))
    return lambda record: shares_json(record.identity(), book, use, now)


def _table(records: list[KeyRecord], shares: ShareView) -> str:
    now = time.time()
    header = (
        "ID",
        "NAME",
        "TIER",
        "STATUS",
        "LIMITS",
        "MODELS",
        "PROVIDERS",
        "SHARES",
        "EXPIRES",
        "LAST USED",
        "CREATED",
    )
    rows = [header] + [
        (
            r.id,
            r.name,
            r.tier,
            _status(r, now),
            _limits(r.limits),
            _list(r.allowed_models),
            _list(r.allowed_providers),
            _shares_text(shares(r)),
            _when(r.expires_at),
            _when(r.last_used),
            _when(r.created),
        )
        for r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    # "never" right after a request reads as a bug; it is the write-behind.
    note = "\nLAST USED: a running server writes it about every 30 s, so it may lag that much."
    return "\n".join(lines) + "\n" + note
