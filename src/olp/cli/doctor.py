"""`olp doctor`: is every configured provider set up, credentialed and reachable?"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import click

from olp.cache.redis_keys import RedisPackageMissing, shared_ping
from olp.cli.inspection import (
    close_all,
    credential_fix,
    describe_provider,
    echo_json,
    endpoint_text,
    load_checked,
    missing_plugin_fix,
    source_of,
)
from olp.config import Config, ProviderConfig
from olp.errors import OLPError
from olp.observability import redacted_url
from olp.providers.base import Provider, ProviderHealth, ProviderPlugin
from olp.registry import Registry, load_registry

__all__ = ["doctor"]

DEFAULT_TIMEOUT_S = 8.0
# Lines of ProviderHealth.checks that doctor reports itself, from the config.
_OWN_CHECKS = ("configured", "credentials")


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None


@dataclass(slots=True)
class ProviderReport:
    name: str
    type: str
    enabled: bool
    endpoint: str
    risk_tier: str | None
    risk: str
    checks: list[Check] = field(default_factory=list)

    @property
    def status(self) -> str:
        if not self.enabled:
            return "off"
        return "ok" if all(c.ok for c in self.checks) else "problem"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option(
    "--timeout",
    type=click.FloatRange(0.1, 120.0),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds to wait for all providers' reachability checks (they run concurrently).",
)
def doctor(as_json: bool, timeout: float) -> None:
    """Check every configured provider and say how to fix what is wrong.

    For each provider: is it configured (a known type, enabled), are its credentials
    present (the variable named by api_key_env is set), is it reachable (a cheap call such
    as GET /v1/models — never a model), and which risk tier its type has. Every problem
    comes with the exact command or setting that fixes it. All providers are checked at
    once; no check takes longer than --timeout seconds. With a shared cache
    (cache.redis_url), Redis is checked too.

    Exit status: 0 all enabled providers (and the shared cache) are ok, 1 at least one
    problem (or no provider at all), 2 the config itself is invalid (the problems are
    listed as by `olp config check`).

    \b
    Examples:
      olp doctor
      olp doctor --timeout 3
      olp doctor --json | jq '.providers[] | select(.status == "problem")'
    """
    registry = load_registry()
    loaded = load_checked(registry, as_json=as_json, strict_types=False)
    config = loaded.config
    progress, show = (None, None) if as_json else (_progress, _show)
    reports = asyncio.run(_check_all(config, loaded.plugins, registry, timeout, progress, show))
    summary, ok = _summary(config, reports)
    cache = _cache_check(config, timeout)
    ok = ok and (cache is None or cache.ok)
    if as_json:
        echo_json(
            {
                "ok": ok,
                "config": source_of(config),
                "notes": list(config.notes),
                "providers": [r.as_dict() for r in reports],
                "cache": asdict(cache) if cache is not None else None,
                "summary": summary,
            }
        )
    else:
        if cache is not None:
            _show_check("cache", cache)
        _print_summary(config, summary, ok)
    sys.exit(0 if ok else 1)


def _cache_check(config: Config, timeout: float) -> Check | None:
    """A shared cache (Redis) is checked too: a dead one costs every miss a timeout."""
    url = config.cache.redis_url
    if url is None or not config.cache.enabled:
        return None
    try:
        ms = shared_ping(url, min(timeout, 5.0))
    except RedisPackageMissing as exc:
        return Check("shared cache", False, exc.message, "pip install 'olp[redis]'")
    except OLPError as exc:
        fix = f"start Redis at {redacted_url(url)}, or fix cache.redis_url in config.json"
        return Check("shared cache", False, exc.message, fix)
    return Check(
        "shared cache", True, f"Redis at {redacted_url(url)} answered a PING in {ms:.0f} ms"
    )


async def _check_all(
    config: Config,
    plugins: Mapping[str, ProviderPlugin],
    registry: Registry,
    budget_s: float,
    progress: Callable[[str], None] | None,
    show: Callable[[ProviderReport], None] | None,
) -> list[ProviderReport]:
    # One deadline for all: the whole run takes at most --timeout seconds.
    deadline = asyncio.get_running_loop().time() + budget_s
    tasks: list[Awaitable[ProviderReport]] = []
    for name, pconf in config.providers.items():
        if progress and pconf.enabled and pconf.type in plugins:
            progress(name)
        tasks.append(_check_one(pconf, plugins.get(pconf.type), registry, deadline))
    reports = []
    # Results appear as they arrive: a slow provider does not hold up the others' lines.
    for next_done in asyncio.as_completed(tasks):
        report = await next_done
        if show:
            show(report)
        reports.append(report)
    order = list(config.providers)
    return sorted(reports, key=lambda r: order.index(r.name))


async def _check_one(
    pconf: ProviderConfig, plugin: ProviderPlugin | None, registry: Registry, deadline: float
) -> ProviderReport:
    desc = describe_provider(pconf, registry)
    tier = desc["risk_tier"]
    report = ProviderReport(
        name=pconf.name,
        type=pconf.type,
        enabled=pconf.enabled,
        endpoint=endpoint_text(desc),
        risk_tier=tier,
        risk=registry.risk_tiers.get(tier, "") if tier else "not in the models registry",
    )
    if not pconf.enabled:
        return report
    if plugin is None:
        fix = missing_plugin_fix(pconf.name, pconf.type, registry)
        report.checks.append(Check("configured", False, f"unknown type {pconf.type!r}", fix))
        return report
    report.checks.append(Check("configured", True, f"{pconf.type}, enabled"))
    report.checks.append(_credentials(pconf, plugin))
    risk = _risk(pconf, tier, registry)
    if risk is not None:
        report.checks.append(risk)
    report.checks.append(await _reachable(pconf, plugin, deadline, report.checks))
    return report


def _credentials(pconf: ProviderConfig, plugin: ProviderPlugin) -> Check:
    var = pconf.api_key_env
    if var is None and plugin.cli is not None:
        # The provider's health (under "reachable") says whether the login is there.
        files = " or ".join(f"~/{rel}" for rel in plugin.cli.credential_files)
        return Check("credentials", True, f"the CLI's own login ({files}, or a key in env)")
    if var is None:
        return Check("credentials", True, "none configured (fine if the server needs none)")
    if pconf.api_key:
        return Check("credentials", True, f"{var} is set")
    return Check("credentials", False, f"{var} is not set", credential_fix(var))


def _risk(pconf: ProviderConfig, tier: str | None, registry: Registry) -> Check | None:
    """Only tiers that need the owner's action are checks; the tier itself is always shown."""
    if tier == "A":
        return Check(
            "risk",
            False,
            f"{pconf.type} is excluded ({registry.risk_tiers.get('A', '')})",
            f"remove providers.{pconf.name} from config.json",
        )
    if tier == "B" and not pconf.consent:
        return Check(
            "risk",
            False,
            f"{pconf.type} is tier B: {registry.risk_tiers.get('B', '')}",
            f"set providers.{pconf.name}.consent to true once you accept that risk",
        )
    return None


async def _reachable(
    pconf: ProviderConfig, plugin: ProviderPlugin, deadline: float, earlier: list[Check]
) -> Check:
    try:
        provider = plugin.factory(pconf)
    except Exception as exc:  # ConfigError, or a plugin bug: report it with the others
        return Check(
            "reachable",
            False,
            f"cannot be built: {exc}",
            f"fix providers.{pconf.name} in config.json, then run `olp config check`",
        )
    try:
        health = await _health(provider, deadline)
    finally:
        await close_all([provider])
    return _health_check(pconf, health, earlier)


async def _health(provider: Provider, deadline: float) -> ProviderHealth:
    try:
        async with asyncio.timeout_at(deadline):
            return await provider.health()
    except TimeoutError:
        return ProviderHealth(False, ("reachable: no answer before the --timeout ran out",))
    except Exception as exc:  # a plugin bug must not hide the other providers' results
        return ProviderHealth(False, (f"reachable: health check failed: {exc!r}",))


def _health_check(pconf: ProviderConfig, health: ProviderHealth, earlier: list[Check]) -> Check:
    # ProviderHealth lines read "name: detail"; configured/credentials are reported above.
    lines = [ln for ln in health.checks if ln.split(":", 1)[0].strip() not in _OWN_CHECKS]
    detail = "; ".join(ln.split(":", 1)[1].strip() if ":" in ln else ln for ln in lines)
    detail = detail or ("yes" if health.ok else "no")
    creds_failed = any(c.name == "credentials" and not c.ok for c in earlier)
    # A missing key fails the provider's health as a whole; it is reported under
    # "credentials", and an upstream that answered the key-less probe is reachable.
    if health.ok or (creds_failed and detail.startswith(_ANSWERED)):
        return Check("reachable", True, detail)
    fix = health.fix
    if creds_failed and fix and pconf.api_key_env and pconf.api_key_env in fix:
        # Already said under "credentials". The provider gives one fix, so a missing key
        # can hide the reachability fix: supply ours when the upstream did not answer.
        fix = _reach_fix(pconf) if detail.startswith("no") else None
    elif fix is None:
        fix = _reach_fix(pconf)
    return Check("reachable", False, detail, fix)


# How an HTTP provider's health says the upstream answered its probe normally
# (`_http_provider.http_health`: "reachable: yes (HTTP 200 in 3 ms)").
_ANSWERED = "yes ("


def _reach_fix(pconf: ProviderConfig) -> str:
    if pconf.base_url:
        return (
            f"check that {pconf.base_url} answers from this machine "
            f"(server running? providers.{pconf.name}.base_url right?)"
        )
    if pconf.command:
        return f"check that `{pconf.command}` runs and is logged in"
    return f"check providers.{pconf.name} in config.json"


def _summary(config: Config, reports: list[ProviderReport]) -> tuple[str, bool]:
    active = [r for r in reports if r.enabled]
    off = len(reports) - len(active)
    bad = [r.name for r in active if r.status == "problem"]
    tail = f" ({off} disabled)" if off else ""
    if not active:
        where = "configured" if config.source == "file" else "found on this machine"
        return f"no enabled provider {where}{tail}", False
    if bad:
        names = ", ".join(bad)
        return f"{len(bad)} of {len(active)} provider(s) have problems: {names}{tail}", False
    return f"all {len(active)} provider(s) ok{tail}", True


def _progress(name: str) -> None:
    click.echo(f"checking {name}…", err=True)


def _show(report: ProviderReport) -> None:
    tier = f"risk tier {report.risk_tier}" if report.risk_tier else "risk tier unknown"
    risk = f" ({report.risk})" if report.risk else ""
    colour = {"ok": "green", "problem": "red", "off": None}[report.status]
    click.secho(f"{report.name}: {report.status}", fg=colour, bold=True, nl=False)
    click.echo(f"  {report.type}, {report.endpoint}")
    click.echo(f"  {tier}{risk}")
    if not report.enabled:
        click.echo(f"  disabled; to use it set providers.{report.name}.enabled to true")
    for c in report.checks:
        _show_line(c)


def _show_check(title: str, check: Check) -> None:
    status = "ok" if check.ok else "problem"
    click.secho(f"{title}: {status}", fg="green" if check.ok else "red", bold=True)
    _show_line(check)


def _show_line(c: Check) -> None:
    mark = "ok " if c.ok else "ERR"
    click.echo(f"  {mark} {c.name:<12} {c.detail}")
    if c.fix:
        click.echo(f"      fix: {c.fix}")


def _print_summary(config: Config, summary: str, ok: bool) -> None:
    if config.source == "detected":
        click.echo(f"\nconfig: none at {config.config_path}; providers detected on this machine")
        for note in config.notes:
            click.echo(f"  note: {note}")
    click.secho(f"\n{summary}", fg="green" if ok else "red")
    if not ok and not any(config.enabled_providers().values()):
        click.echo(
            "fix: set an API key variable such as OPENAI_API_KEY, or write "
            f"{config.config_path} (see docs/configuration.md)"
        )
