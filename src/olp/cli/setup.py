"""`olp setup`: the first-run wizard — detect, plan, write config.json, make the owner key,
print client settings. The rules live in `setup_plan` (pure), the probes in `setup_detect`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from olp.accounts import OwnerKeyFile
from olp.accounts.keystore import KeyStore, keys_db_path
from olp.cli.common import client_base_url, fail
from olp.cli.config_file import check_document, replace_config
from olp.cli.setup_clients import client_snippets
from olp.cli.setup_detect import detect_machine
from olp.cli.setup_plan import (
    DEFAULT_PORT,
    Candidate,
    Machine,
    Plan,
    build_config,
    candidates,
    default_plan,
    nothing_found_note,
    plan_chains,
)
from olp.cli.setup_render import render_config
from olp.config import olp_home
from olp.errors import OLPError
from olp.providers.base import ProviderPlugin
from olp.providers.loader import known_providers, load_plugins
from olp.registry import Registry, load_registry
from olp.registry.known import Known

__all__ = ["setup"]


@click.command()
@click.option("--yes", "-y", is_flag=True, help="No questions: take the defaults (for scripts).")
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing config.json without asking (a backup is kept).",
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    help="OLP's directory (default: $OLP_HOME, else ~/.olp).",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port OLP will listen on (asked again unless --yes).",
)
@click.option("--no-local", is_flag=True, help="Do not probe local servers (Ollama, vLLM, …).")
def setup(yes: bool, force: bool, home: Path | None, port: int, no_local: bool) -> None:
    """Detect what this machine has and write a working config.json.

    Finds subscription CLIs on PATH (claude, codex, vibe, gemini, qwen) and whether they
    are logged in, API-key variables (OPENAI_API_KEY, ANTHROPIC_API_KEY, …) and local
    servers (Ollama, vLLM/llama.cpp, LM Studio); proposes one provider for each and a
    fallback chain per model family (sonnet, gpt-5, devstral, gemini-pro, local, default,
    …); writes $OLP_HOME/config.json (mode 0600); creates the owner key; and prints
    settings to paste into curl, the openai SDK, Continue, Cline, Aider and Open WebUI.

    Interactive by default. With --yes it asks nothing: it adds every risk-tier D provider
    found and all default chains; tier C and B providers (gemini, qwen) need a question.
    An existing config.json is never replaced silently: interactively you are asked,
    with --yes it is refused unless --force is given; either way a backup is kept as
    config.json.bak-<timestamp>.

    \b
    Examples:
      olp setup
      olp setup --yes
      olp setup --yes --force --home /srv/olp --port 8080
    """
    env = os.environ
    home = (home or olp_home(env)).expanduser().absolute()
    path = home / "config.json"
    if not _may_replace(path, yes=yes, force=force):
        click.echo(f"Kept {path}; nothing changed. `olp config check` shows what it does.")
        return
    click.echo("Looking at this machine:")
    registry = load_registry()
    known = known_providers(_plugins(), registry)
    machine = detect_machine(
        env, known, _progress, probe_local=not no_local, accounts_dir=home / "accounts"
    )
    if yes:
        plan = default_plan(machine, known, registry, port=port)
    else:
        plan = _ask(machine, known, registry, port)
    _show(plan)
    if not yes and not click.confirm(f"\nWrite {path}?", default=True):
        click.echo("Nothing written.")
        return
    data = render_config(plan.config)
    check_document(data, env, command="olp setup")
    backup = replace_config(path, data)
    if backup:
        click.echo(f"\nBacked up the previous config to {backup}")
    click.echo(f"\nWrote {path}")
    key = _owner_key(home, env)
    # `olp start` must find this directory too.
    prefix = "" if home == olp_home(env).expanduser().absolute() else f"OLP_HOME={home} "
    _print_clients(plan, key, prefix)


def _may_replace(path: Path, *, yes: bool, force: bool) -> bool:
    """False: keep the existing config (the owner said no). Refusing under --yes exits 2."""
    if not (path.exists() or path.is_symlink()) or force:
        return True
    if yes:
        fail(
            f"{path} already exists; `olp setup --yes` does not replace it",
            hint="run `olp setup` to be asked, or `olp setup --yes --force` "
            "(the old file is kept as config.json.bak-<timestamp>)",
        )
    return click.confirm(
        f"{path} already exists. Overwrite it? (a backup is kept as config.json.bak-<timestamp>)",
        default=False,
    )


def _progress(line: str) -> None:
    click.echo(f"  {line}")


def _plugins() -> dict[str, ProviderPlugin]:
    try:
        return load_plugins()
    except Exception as exc:  # a broken third-party plugin: say which, never a traceback
        fail(
            f"cannot load the installed provider plugins: {exc}",
            hint="reinstall or uninstall the package that provides the broken plugin",
        )


def _ask(machine: Machine, known: Known, registry: Registry, port: int) -> Plan:
    found, notes = candidates(machine, known, registry)
    for note in notes:
        click.echo(f"note: {note}")
    chosen = [c for c in found if _confirm_provider(c, registry)]
    chains = plan_chains(chosen)
    if chains:
        click.echo("\nDefault chains (a request for the name tries each hop in turn):")
        for name, hops in chains.items():
            click.echo(f"  {name:<13} {_hops(hops)}")
        picked = click.prompt(
            "Chains to write (comma-separated names, 'all' or 'none')",
            default="all",
            value_proc=lambda text: _pick(text, list(chains)),
        )
        chains = {name: hops for name, hops in chains.items() if name in picked}
    port = click.prompt("Port for OLP", default=port, type=click.IntRange(1, 65535))
    extra = () if chosen else (nothing_found_note(known),)
    config = build_config(chosen, chains, port=port)
    return Plan(config, tuple(chosen), chains, extra)


def _confirm_provider(c: Candidate, registry: Registry) -> bool:
    what = f"{c.name} ({c.type}): {c.summary}"
    if c.default_on:
        return click.confirm(f"Add {what}?", default=True)
    meaning = registry.risk_tiers.get(c.tier, "not in the models registry")
    info = registry.provider_type(c.type)
    click.echo(f"\n{c.name} ({c.type}) is risk tier {c.tier}: {meaning}.")
    if info and info.note:
        click.echo(f"  {info.note}")
    if c.needs_consent:
        return click.confirm(
            f"I accept that risk: add {what}, recording my consent in config.json?",
            default=False,
        )
    return click.confirm(f"Opt in: add {what}?", default=False)


def _pick(text: str, names: list[str]) -> set[str]:
    words = {w.strip() for w in text.split(",") if w.strip()}
    if words in ({"all"}, set()):
        return set(names)
    if words == {"none"}:
        return set()
    unknown = sorted(words - set(names))
    if unknown:
        raise click.BadParameter(f"unknown chain(s): {', '.join(unknown)}")
    return words


def _hops(hops: list[dict[str, Any]]) -> str:
    return " → ".join(_hop_text(h) for h in hops)


def _hop_text(hop: dict[str, Any]) -> str:
    if "pool" in hop:
        return f"pool({', '.join(hop['pool'])})/{hop['model']}"
    return f"{hop['provider']}/{hop['model']}"


def _show(plan: Plan) -> None:
    click.echo("\nProviders:" if plan.providers else "\nProviders: none")
    for c in plan.providers:
        click.echo(f"  {c.name:<13} {c.type:<15} {c.summary}")
    if plan.chains:
        click.echo("Chains:")
        for name, hops in plan.chains.items():
            click.echo(f"  {name:<13} {_hops(hops)}")
    for note in plan.notes:
        click.echo(f"note: {note}")


def _owner_key(home: Path, env: Mapping[str, str]) -> str | None:
    """A new owner-tier key in the key store (printed once, only its hash kept), or None
    when the owner already has a credential — then say how to replace it."""
    if env.get("OLP_OWNER_TOKEN"):
        click.echo("\nOwner key: OLP_OWNER_TOKEN is set, so none is made; that token is your key.")
        return None
    try:
        store = KeyStore.open(keys_db_path(home))
    except OLPError as exc:
        fail(exc.message)
    try:
        return _owner_key_in(store, OwnerKeyFile(home))
    except OLPError as exc:
        fail(exc.message)
    finally:
        store.close()


def _owner_key_in(store: KeyStore, legacy: OwnerKeyFile) -> str | None:
    owners = [r for r in store.list_keys(include_revoked=False) if r.tier == "owner"]
    if owners:
        first = owners[0]
        click.echo(
            f"\nOwner key: you already have one ({first.name}, {first.id}); it is never "
            f"shown again.\nTo replace it: `olp keys rotate {first.id}` prints a new one."
        )
        return None
    if legacy.load_hash():
        click.echo(
            f"\nOwner key: you already have one (made by `olp start`, its hash in "
            f"{legacy.path}); it is never shown again.\nTo replace it: "
            "`olp keys create --name owner --tier owner`, then delete that file."
        )
        return None
    # A member key may already be called "owner": names of active keys are unique.
    taken = {r.name for r in store.list_keys(include_revoked=False)}
    name = next(n for n in ("owner", *(f"owner-{i}" for i in range(2, 1000))) if n not in taken)
    new = store.create(name, tier="owner")
    click.echo(
        f"\nYour owner key {new.record.name!r} ({new.record.id}) — shown once; only its "
        f"hash is kept in {store.path}:\n\n    {new.secret}\n"
    )
    return new.secret


def _print_clients(plan: Plan, key: str | None, prefix: str) -> None:
    server = plan.config["server"]
    base_url = client_base_url(server["host"], server["port"])
    if key is None:
        key = "<your OLP key>"
    model = "default" if "default" in plan.chains else next(iter(plan.chains), "default")
    click.echo(f"Client settings (base URL {base_url}, model {model!r}):\n")
    click.echo(client_snippets(base_url, key, model))
    if plan.providers:
        click.echo(
            f"next: `{prefix}olp start`, then `{prefix}olp doctor` "
            "(an `olp start` already running on this home applies its providers and chains "
            "within a second)"
        )
    else:
        click.echo(
            "next: add a provider (see the note above), run `olp setup` again, then `olp start`"
        )
