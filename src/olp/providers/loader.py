"""Find provider plugins (entry-point group `olp.providers`) and build configured providers."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points

from olp.config import Config
from olp.errors import ConfigError
from olp.providers.base import Provider, ProviderPlugin

__all__ = ["ENTRY_POINT_GROUP", "build_providers", "load_plugins"]

ENTRY_POINT_GROUP = "olp.providers"


def load_plugins() -> dict[str, ProviderPlugin]:
    """Every installed provider type, built-ins included, by type name."""
    plugins: dict[str, ProviderPlugin] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        plugin = ep.load()
        if not isinstance(plugin, ProviderPlugin):
            raise ConfigError(f"entry point {ep.name}", "is not an olp ProviderPlugin")
        plugins[plugin.type] = plugin
    return plugins


def build_providers(config: Config, plugins: Mapping[str, ProviderPlugin]) -> dict[str, Provider]:
    """One provider object per *enabled* configured provider."""
    providers: dict[str, Provider] = {}
    for name, pconf in config.enabled_providers().items():
        plugin = plugins.get(pconf.type)
        if plugin is None:
            known = ", ".join(sorted(plugins)) or "none installed"
            raise ConfigError(
                f"providers.{name}.type", f"unknown provider type {pconf.type!r} (known: {known})"
            )
        providers[name] = plugin.factory(pconf)
    return providers
