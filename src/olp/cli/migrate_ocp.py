"""`olp migrate-from-ocp`: move from OCP (Open Claude Proxy) to OLP without touching a client.

Reads OCP's `ocp.db` and `admin-key` (never changing them) and OCP's settings (its systemd
unit or launchd agent, then this shell's environment); imports every key by the hash of its
secret, each quota as the matching key limit, the usage log as ledger rows marked as
imported, and OCP's claude settings as a `claude-cli` provider when config.json has none.
A second run finds everything in place and changes nothing.
"""

from __future__ import annotations

import os
import plistlib
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click
import orjson

from olp.accounts.keystore import KeyStore, keys_db_path
from olp.accounts.ocp import (
    KeyStep,
    OcpData,
    apply_keys,
    import_usage,
    plan_keys,
    read_ocp,
    usage_records,
)
from olp.cli.common import fail
from olp.cli.config_file import check_document, replace_config
from olp.config import olp_home
from olp.errors import OLPError

__all__ = ["migrate_from_ocp"]

# OCP's own defaults, for settings its service does not set.
_OCP_PORT = 3456
_SETTINGS = ("CLAUDE_TIMEOUT", "CLAUDE_MAX_CONCURRENT", "CLAUDE_SYSTEM_PROMPT", "CLAUDE_BIN")
_DEFAULT_FIRST_BYTE_MS = 60_000


@click.command("migrate-from-ocp")
@click.option(
    "--ocp-home",
    type=click.Path(file_okay=False, path_type=Path),
    help="OCP's folder, holding ocp.db (default: ~/.ocp).",
)
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
def migrate_from_ocp(ocp_home: Path | None, dry_run: bool) -> None:
    """Import OCP's keys, quotas, usage log and claude settings into OLP.

    \b
    Every `ocp_…` key keeps working against OLP unchanged (only its hash is stored);
    revoked keys stay revoked; OCP's admin key becomes an owner key. OCP's files are
    only read. Running it again changes nothing. Stop OCP first: OLP listens on the
    same port, 3456, so OCP's clients need no change (docs/setup.md).

    \b
    Examples:
      olp migrate-from-ocp --dry-run
      olp migrate-from-ocp --ocp-home /srv/ocp/.ocp
    """
    try:
        _migrate(ocp_home, dry_run)
    except OLPError as exc:  # an unreadable OCP file, a damaged or locked OLP one
        fail(exc.message)


def _migrate(ocp_home: Path | None, dry_run: bool) -> None:
    env = os.environ
    source = (ocp_home or Path.home() / ".ocp").expanduser()
    home = olp_home(env).expanduser()
    data = read_ocp(source)
    settings = _ocp_settings(Path.home(), env)
    verb = "Would" if dry_run else "Will"
    click.echo(f"Reading {data.path} (not changed).")
    for reason in data.skipped:
        click.echo(f"  skipped {reason}")
    store = KeyStore.open(keys_db_path(home))
    try:
        steps = plan_keys(store, data.keys)
        _show_keys(steps, verb)
        provider = _claude_provider(home, settings, env, dry_run=dry_run)
        if dry_run:
            click.echo(f"Would import up to {len(data.usage)} usage rows into the ledger.")
            click.echo("Dry run: nothing changed.")
            return
        key_ids = apply_keys(store, steps)
    finally:
        store.close()
    _import_usage(home, data, key_ids, provider)
    _closing_notes(settings, home)


def _show_keys(steps: list[KeyStep], verb: str) -> None:
    added = [s for s in steps if s.action == "add"]
    click.echo(
        f"Keys: {len(steps)} in OCP; {len(added)} to import, {len(steps) - len(added)} "
        "already in OLP."
    )
    for step in steps:
        key = step.key
        what = f"{verb.lower()} import" if step.action == "add" else "already in OLP"
        state = " (revoked)" if key.revoked else ""
        limits = _limits_text(step)
        click.echo(f"  {key.name or '-'}{state}: {what} as {step.name!r}, {key.tier}{limits}")


def _limits_text(step: KeyStep) -> str:
    limits = step.key.limits
    parts = [
        f"{label} {value}"
        for label, value in (("rpd", limits.rpd), ("rp7d", limits.rp7d), ("rp30d", limits.rp30d))
        if value is not None
    ]
    return f"; limits {', '.join(parts)}" if parts else ""


def _import_usage(home: Path, data: OcpData, key_ids: dict[int, str], provider: str) -> None:
    added = import_usage(home, usage_records(data.usage, key_ids, provider))
    known = len(data.usage) - added
    click.echo(
        f"Ledger: imported {added} usage rows as answered by {provider!r}"
        + (f" ({known} were imported before)." if known else ".")
    )


def _closing_notes(settings: Mapping[str, str], home: Path) -> None:
    port = settings.get("CLAUDE_PROXY_PORT")
    if port and port != str(_OCP_PORT):
        click.echo(
            f"note: OCP listened on port {port}; start OLP with `olp start --port {port}`"
            " so its clients keep working."
        )
    click.echo(
        f"Done. Stop OCP, then `olp start` (OLP_HOME={home}); OCP's clients keep "
        "their base URL and keys."
    )


# -- OCP's claude settings -> a claude-cli provider ----------------------------------------


def _claude_provider(
    home: Path, settings: Mapping[str, str], env: Mapping[str, str], *, dry_run: bool
) -> str:
    """The name of config.json's claude-cli provider, adding one from OCP's settings when
    there is none; "claude" (what OLP detects) when there is no config.json."""
    path = home / "config.json"
    if not path.exists():
        click.echo(
            f"Config: no {path}; OLP detects a logged-in claude by itself. To carry OCP's "
            "timeout and concurrency over, run `olp setup`, then this command again."
        )
        return "claude"
    try:
        document = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        fail(f"cannot read {path}: {exc}", hint="`olp config check` says what is wrong")
    providers = document.setdefault("providers", {})
    for name, provider in providers.items():
        if isinstance(provider, dict) and provider.get("type") == "claude-cli":
            click.echo(f"Config: provider {name!r} is already a claude-cli; left as it is.")
            return str(name)
    name = "claude" if "claude" not in providers else "claude-ocp"
    providers[name] = _provider_from(settings)
    shown = orjson.dumps(providers[name]).decode()
    if dry_run:
        click.echo(f"Config: would add provider {name!r}: {shown}")
        return name
    data = orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"
    check_document(data, env, command="olp migrate-from-ocp")
    backup = replace_config(path, data)
    click.echo(f"Config: added provider {name!r}: {shown} (backup: {backup})")
    return name


def _provider_from(settings: Mapping[str, str]) -> dict[str, Any]:
    provider: dict[str, Any] = {"type": "claude-cli"}
    if command := settings.get("CLAUDE_BIN"):
        provider["command"] = command
    if (concurrent := _positive(settings.get("CLAUDE_MAX_CONCURRENT"))) is not None:
        provider["max_concurrent"] = concurrent
    if prompt := settings.get("CLAUDE_SYSTEM_PROMPT"):
        provider["system_prompt"] = prompt  # after the client's own, as OCP put it
    if (total := _positive(settings.get("CLAUDE_TIMEOUT"))) is not None:
        # OCP had one per-request timeout; OLP's first-byte and idle waits fit inside it.
        wait = min(total, _DEFAULT_FIRST_BYTE_MS)
        provider["timeouts"] = {"total_ms": total, "first_byte_ms": wait, "idle_ms": wait}
    return provider


def _positive(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    value = int(text)
    return value if value > 0 else None


def _ocp_settings(user_home: Path, env: Mapping[str, str]) -> dict[str, str]:
    """OCP's environment as its service had it, then this shell's variables over it."""
    found: dict[str, str] = {}
    for values in (_systemd_env(user_home), _launchd_env(user_home)):
        found.update(values)
    found.update({k: v for k, v in env.items() if k in (*_SETTINGS, "CLAUDE_PROXY_PORT")})
    return found


def _systemd_env(user_home: Path) -> Iterator[tuple[str, str]]:
    unit = user_home / ".config/systemd/user/ocp-proxy.service"
    try:
        lines = unit.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return
    for line in lines:
        if not line.startswith("Environment="):
            continue
        for assignment in shlex.split(line.removeprefix("Environment=")):
            key, sep, value = assignment.partition("=")
            if sep:
                yield key, value


def _launchd_env(user_home: Path) -> Iterator[tuple[str, str]]:
    for plist in sorted((user_home / "Library/LaunchAgents").glob("*ocp*.plist")):
        try:
            document = plistlib.loads(plist.read_bytes())
        except (OSError, plistlib.InvalidFileException, ValueError):
            continue
        variables = document.get("EnvironmentVariables") if isinstance(document, dict) else None
        if isinstance(variables, dict):
            yield from ((str(k), str(v)) for k, v in variables.items())
