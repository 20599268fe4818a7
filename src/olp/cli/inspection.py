"""What `olp config check` and `olp doctor` share.

Loading the config and the provider plugins exactly as `olp start` does, but reporting
every problem (with its JSON path) instead of stopping at the first; describing each
provider without ever printing a secret; closing providers afterwards.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import click
import orjson

from olp.config import Config, ConfigProblems, ProviderConfig, load_config, olp_home
from olp.errors import ConfigError
from olp.providers.base import Provider, ProviderPlugin
from olp.providers.loader import known_providers, load_plugins
from olp.registry import Registry

__all__ = [
    "Loaded",
    "Problem",
    "close_all",
    "credential_fix",
    "credential_text",
    "describe_provider",
    "echo_json",
    "endpoint_text",
    "exit_with_problems",
    "load_checked",
    "missing_plugin_fix",
    "source_of",
    "unknown_types",
]

EXIT_INVALID_CONFIG = 2


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason the config cannot be used: its JSON path, why, and how to fix it."""

    path: str
    reason: str
    hint: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"path": self.path, "reason": self.reason, "hint": self.hint}


@dataclass(frozen=True, slots=True)
class Loaded:
    config: Config
    plugins: Mapping[str, ProviderPlugin]


def load_checked(registry: Registry, *, as_json: bool, strict_types: bool = True) -> Loaded:
    """Config + plugins as `olp start` sees them; on any problem, report all and exit 2.

    With `strict_types=False` an enabled provider of an uninstalled type is left for the
    caller to report (`olp doctor` shows it as that provider's problem).
    """
    try:
        plugins = load_plugins()
        config = load_config(known=known_providers(plugins, registry))
    except ConfigError as exc:
        exit_with_problems(_problems(exc), as_json=as_json)
    unknown = unknown_types(config, plugins, registry) if strict_types else []
    if unknown:
        exit_with_problems(unknown, as_json=as_json)
    return Loaded(config, plugins)


def _problems(exc: ConfigError) -> list[Problem]:
    found = exc.problems if isinstance(exc, ConfigProblems) else [exc]
    return [Problem(p.path, p.reason, _hint(p.reason)) for p in found]


def _hint(reason: str) -> str | None:
    # Only where the loader's reason does not already say what to do.
    if reason == "unknown key":
        return "remove it or fix its spelling; docs/configuration.md lists every key"
    if reason.startswith("unknown provider"):
        return 'name a provider configured under "providers", or add one with that name'
    return None


def unknown_types(
    config: Config, plugins: Mapping[str, ProviderPlugin], registry: Registry
) -> list[Problem]:
    """Every enabled provider whose type has no installed plugin (`olp start` would stop)."""
    installed = ", ".join(sorted(plugins)) or "none installed"
    problems = []
    for name, pconf in config.enabled_providers().items():
        if pconf.type in plugins:
            continue
        problems.append(
            Problem(
                f"providers.{name}.type",
                f"unknown provider type {pconf.type!r} (known: {installed})",
                missing_plugin_fix(name, pconf.type, registry),
            )
        )
    return problems


def missing_plugin_fix(name: str, ptype: str, registry: Registry) -> str:
    if registry.provider_type(ptype) is not None:
        return (
            f"this OLP version has no {ptype} plugin yet; set providers.{name}.enabled "
            "to false until it arrives"
        )
    known = ", ".join(sorted(registry.provider_types))
    return f"fix the type (types OLP knows: {known}) or install the plugin that provides it"


def exit_with_problems(problems: list[Problem], *, as_json: bool) -> NoReturn:
    path = str(olp_home(os.environ) / "config.json")
    if as_json:
        echo_json({"ok": False, "config": path, "problems": [p.as_dict() for p in problems]})
        sys.exit(EXIT_INVALID_CONFIG)
    click.secho(
        f"error: the configuration cannot be used ({len(problems)} problem(s)):", fg="red", err=True
    )
    for p in problems:
        click.echo(f"  - {p.path}: {p.reason}" if p.path else f"  - {p.reason}", err=True)
        if p.hint:
            click.echo(f"      fix: {p.hint}", err=True)
    click.echo(
        f"hint: edit {path}, then run `olp config check` again "
        "(docs/configuration.md describes every key)",
        err=True,
    )
    sys.exit(EXIT_INVALID_CONFIG)


def source_of(config: Config) -> dict[str, str]:
    """Where the providers came from: the file, or detection (then `path` does not exist)."""
    return {"source": config.source, "path": str(config.config_path)}


def describe_provider(pconf: ProviderConfig, registry: Registry) -> dict[str, Any]:
    """Everything worth showing about one provider — names of secrets, never values."""
    info = registry.provider_type(pconf.type)
    command = pconf.command or (info.command if info else None)
    return {
        "name": pconf.name,
        "type": pconf.type,
        "enabled": pconf.enabled,
        "base_url": pconf.base_url,
        "command": command,
        "command_is_default": pconf.command is None and command is not None,
        "api_key_env": pconf.api_key_env,
        "api_key_set": bool(pconf.api_key) if pconf.api_key_env else None,
        "models": list(pconf.models),
        # Header and child-env values may be secrets: names only.
        "headers": sorted(pconf.headers),
        "env": sorted(pconf.env),
        "max_concurrent": pconf.max_concurrent,
        "vendor": info.vendor if info else None,
        "risk_tier": info.risk_tier if info else None,
    }


def endpoint_text(desc: Mapping[str, Any]) -> str:
    if desc["base_url"]:
        return str(desc["base_url"])
    if desc["command"]:
        suffix = " (default)" if desc["command_is_default"] else ""
        return f"command {desc['command']}{suffix}"
    return "the type's default endpoint"


def credential_text(desc: Mapping[str, Any]) -> str:
    var = desc["api_key_env"]
    if var is None:
        if str(desc["type"]).endswith("-cli"):
            return "the CLI's own login"
        return "none configured (fine for servers that need no key)"
    return f"{var} ({'set' if desc['api_key_set'] else 'NOT set'})"


def credential_fix(var: str) -> str:
    return (
        f"export {var}=<your key> in the shell or service that runs `olp start`, then restart olp"
    )


async def close_all(providers: Iterable[Provider]) -> None:
    for provider in providers:
        try:
            await provider.aclose()
        except Exception as exc:  # a plugin's close bug must not hide the report
            click.echo(f"warning: closing {provider.name} failed: {exc}", err=True)


def echo_json(payload: Mapping[str, Any]) -> None:
    click.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())
