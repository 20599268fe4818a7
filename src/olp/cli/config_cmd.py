"""`olp config check`: validate the configuration and show what it means."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import click

from olp.accounts.pricing import Pricing
from olp.cli.inspection import (
    Problem,
    close_all,
    credential_fix,
    credential_text,
    describe_provider,
    echo_json,
    endpoint_text,
    exit_with_problems,
    load_checked,
    source_of,
)
from olp.config import Config
from olp.engine.routing import Hop, Router
from olp.errors import ConfigError, OLPError
from olp.providers.base import Provider
from olp.providers.loader import build_providers
from olp.quota import soft_trigger_warnings
from olp.registry import Registry, load_registry

__all__ = ["config_group"]


@dataclass(frozen=True, slots=True)
class Route:
    """A name a client may send as `model`, and the hops it resolves to."""

    model: str
    kind: str  # "chain" (routing.chains), "declared" (a provider's models), "alias" (registry)
    # {"provider", "model", "priced"}: priced when OLP can count the hop's cost
    chain: tuple[dict[str, str | bool], ...]


@dataclass(frozen=True, slots=True)
class Warn:
    """Usable, but probably not what the owner meant."""

    path: str
    message: str
    fix: str | None = None


@click.group("config")
def config_group() -> None:
    """Inspect the configuration ($OLP_HOME/config.json).

    \b
    Examples:
      olp config check            validate it and show every provider and chain
      olp config check --json     the same, as one JSON object
    """


@config_group.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def check(as_json: bool) -> None:
    """Validate $OLP_HOME/config.json and show what it means.

    Loads the configuration exactly as `olp start` would, then prints where it came from
    (the file, or the providers detected on this machine when there is no file), every
    provider (type, enabled, endpoint or command, the credential variable and whether it
    is set — never the secret itself) and every model name a client can ask for, with the
    chain of provider/model hops it resolves to.

    Exit status: 0 when the config is usable (warnings may be printed, e.g. an unset
    api_key_env or a chain hop whose provider is disabled); 2 when it is not — every
    problem is listed with its JSON path and how to fix it. No provider is contacted
    (use `olp doctor` for that); without a config file, detection looks for a local
    Ollama exactly as `olp start` does.

    \b
    Examples:
      olp config check
      OLP_HOME=/srv/olp olp config check
      olp config check --json | jq '.models[] | select(.kind == "chain")'
    """
    registry = load_registry()
    loaded = load_checked(registry, as_json=as_json)
    config = loaded.config
    try:
        providers = build_providers(config, loaded.plugins)
    except ConfigError as exc:
        exit_with_problems([Problem(exc.path, exc.reason)], as_json=as_json)
    try:
        report = _report(config, registry, providers)
    finally:
        asyncio.run(close_all(providers.values()))
    if as_json:
        echo_json(report)
    else:
        _print(report)


def _report(
    config: Config, registry: Registry, providers: Mapping[str, Provider]
) -> dict[str, Any]:
    router = Router(config, registry, providers)
    pricing = Pricing(registry, config)
    return {
        "ok": True,
        "config": source_of(config),
        "notes": list(config.notes),
        "providers": [describe_provider(p, registry) for p in config.providers.values()],
        "models": [asdict(r) for r in _routes(config, router, providers, pricing)],
        # `provider/model` reaches any enabled provider directly (docs/design.md §3, step 3).
        "direct": sorted(providers),
        "warnings": [asdict(w) for w in _warnings(config, registry, providers)],
    }


def _routes(
    config: Config, router: Router, providers: Mapping[str, Provider], pricing: Pricing
) -> list[Route]:
    declared = {
        model for name, p in config.providers.items() if name in providers for model in p.models
    }
    routes = []
    for model, _owner in router.model_ids():
        try:
            chain = router.resolve(model)
        except OLPError:  # model_ids() lists only names that resolve; never fail the report
            continue
        kind = "chain" if model in config.routing.chains else "declared"
        if kind == "declared" and model not in declared:
            kind = "alias"
        hops = tuple(_hop_entry(hop, pricing) for hop in chain.hops)
        routes.append(Route(model, kind, hops))
    return routes


def _hop_entry(hop: Hop, pricing: Pricing) -> dict[str, str | bool]:
    # priced: OLP can count the hop's cost, so keys with a USD budget may use it
    priced = pricing.counts_cost(hop.name, hop.provider, hop.model)
    return {"provider": hop.name, "model": hop.model, "priced": priced}


def _warnings(config: Config, registry: Registry, providers: Mapping[str, Provider]) -> list[Warn]:
    warns = _chain_warnings(config, providers)
    if not providers:
        warns.append(
            Warn(
                "providers",
                "no provider is enabled, so every chat request will fail",
                "enable a provider in config.json, or (with no config file) set an API key "
                "variable such as OPENAI_API_KEY",
            )
        )
    for name, pconf in config.enabled_providers().items():
        if pconf.api_key_env and not pconf.api_key:
            warns.append(
                Warn(
                    f"providers.{name}.api_key_env",
                    f"{pconf.api_key_env} is not set, so {name} cannot authenticate "
                    "(its requests fail with provider_auth_failed)",
                    credential_fix(pconf.api_key_env),
                )
            )
        info = registry.provider_type(pconf.type)
        if info is not None and info.risk_tier == "B" and not pconf.consent:
            warns.append(
                Warn(
                    f"providers.{name}.consent",
                    f"{pconf.type} is risk tier B ({registry.risk_tiers.get('B', '')})",
                    f"set providers.{name}.consent to true once you accept that risk",
                )
            )
    signals = {name: p.capabilities.quota_signals for name, p in providers.items()}
    for warning in soft_trigger_warnings(config.routing.soft_triggers, signals):
        path, _, message = warning.partition(" ")
        warns.append(Warn(path, message))
    return warns


def _chain_warnings(config: Config, providers: Mapping[str, Provider]) -> list[Warn]:
    warns = []
    for model, hops in config.routing.chains.items():
        for i, hop in enumerate(hops):
            # The loader guarantees the provider is configured; not built means disabled.
            if hop.provider not in providers:
                warns.append(
                    Warn(
                        f"routing.chains.{model}[{i}]",
                        f"provider {hop.provider!r} is disabled, so this hop is skipped",
                        f"set providers.{hop.provider}.enabled to true, or remove the hop",
                    )
                )
        if not any(h.provider in providers for h in hops):
            warns.append(
                Warn(
                    f"routing.chains.{model}",
                    f"every hop's provider is disabled: requests for {model!r} fail with 503",
                    "enable one of its providers",
                )
            )
    return warns


def _print(report: Mapping[str, Any]) -> None:
    _print_source(report)
    _print_providers(report["providers"])
    _print_models(report["models"], report["direct"], report["providers"])
    warnings = report["warnings"]
    if warnings:
        click.echo(f"\nwarnings ({len(warnings)}):")
        for w in warnings:
            click.secho(f"  ! {w['path']}: {w['message']}", fg="yellow")
            if w["fix"]:
                click.echo(f"      fix: {w['fix']}")
    enabled = sum(1 for p in report["providers"] if p["enabled"])
    summary = (
        f"\nconfig OK: {len(report['providers'])} provider(s) ({enabled} enabled), "
        f"{len(report['models'])} model name(s)"
    )
    click.secho(summary + (f", {len(warnings)} warning(s)" if warnings else ""), fg="green")
    if report["config"]["source"] == "file":
        from olp.server.reload import restart_only_fields  # (the server: only if needed)

        fixed = ", ".join(restart_only_fields())
        click.echo(
            textwrap.fill(
                f"a running `olp start` applies this file within a second, except {fixed}"
                " (read at start only)",
                width=80,
            )
        )


def _print_source(report: Mapping[str, Any]) -> None:
    source = report["config"]
    if source["source"] == "file":
        click.echo(f"config: {source['path']}")
    else:
        click.echo(f"config: none at {source['path']}; providers detected on this machine")
    for note in report["notes"]:
        click.echo(f"  note: {note}")


def _print_providers(providers: list[dict[str, Any]]) -> None:
    enabled = sum(1 for p in providers if p["enabled"])
    click.echo(f"\nproviders ({len(providers)} configured, {enabled} enabled):")
    for p in providers:
        state = "enabled" if p["enabled"] else "disabled"
        tier = f"tier {p['risk_tier']}" if p["risk_tier"] else "tier unknown"
        click.echo(f"  {p['name']}  {p['type']}, {state}, {tier}")
        click.echo(f"    endpoint     {endpoint_text(p)}")
        click.echo(f"    credentials  {credential_text(p)}")
        if p["models"]:
            click.echo(f"    models       {', '.join(p['models'])}")
        if p["env"]:
            click.echo(f"    child env    {', '.join(p['env'])}")


def _print_models(
    models: list[dict[str, Any]], direct: list[str], providers: list[dict[str, Any]]
) -> None:
    click.echo(f"\nmodels a client can ask for ({len(models)}):")
    width = min(max((len(m["model"]) for m in models), default=0), 32)
    for m in models:
        hops = " → ".join(
            f"{h['provider']}/{h['model']}" + ("" if h["priced"] else "*") for h in m["chain"]
        )
        click.echo(f"  {m['model']:<{width}}  → {hops}   ({m['kind']})")
    if any(not h["priced"] for m in models for h in m["chain"]):
        click.echo(
            '  * no price: keys with a USD budget skip this hop (add one under "pricing" '
            "in config.json; docs/keys.md)"
        )
    if direct:
        first = next(p for p in providers if p["name"] == direct[0])
        example = f"{direct[0]}/{first['models'][0] if first['models'] else '<model>'}"
        click.echo(f"  any enabled provider also answers <provider>/<model>, e.g. {example}")
    else:
        click.echo("  (none: no provider is enabled)")
