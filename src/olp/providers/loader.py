"""Find provider plugins (entry-point group `olp.providers`) and build configured providers."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from types import MappingProxyType

from olp.config import Config
from olp.errors import ConfigError
from olp.providers.base import Provider, ProviderPlugin
from olp.registry import RISK_TIERS, Registry, load_registry
from olp.registry.known import Known

__all__ = ["ENTRY_POINT_GROUP", "build_providers", "known_providers", "load_plugins"]

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


def known_providers(plugins: Mapping[str, ProviderPlugin], registry: Registry) -> Known:
    """What the installed plugins declare for detection and setup.

    In the order detection reports them and setup's `default` chain tries them: the
    safest risk tier first, then by type name (an HTTP type's servers as it lists them).
    """
    tiers = {t: info.risk_tier for t in plugins if (info := registry.provider_type(t))}
    unknown = len(RISK_TIERS)

    def order(ptype: str) -> tuple[int, str]:
        tier = tiers.get(ptype)
        return (RISK_TIERS[::-1].index(tier) if tier else unknown, ptype)

    ordered = [(t, plugins[t]) for t in sorted(plugins, key=order)]
    return Known(
        types=frozenset(plugins),
        clis=tuple((t, p.cli) for t, p in ordered if p.cli is not None),
        apis=tuple((t, api) for t, p in ordered for api in p.apis),
        tiers=MappingProxyType(tiers),
    )


def build_providers(
    config: Config, plugins: Mapping[str, ProviderPlugin], registry: Registry | None = None
) -> dict[str, Provider]:
    """One provider object per *enabled* configured provider.

    Risk tiers (docs/providers.md): tier A cannot be enabled at all; tier B only with the
    owner's consent recorded in config (`"consent": true`).
    """
    registry = registry or load_registry()
    providers: dict[str, Provider] = {}
    for name, pconf in config.enabled_providers().items():
        plugin = plugins.get(pconf.type)
        if plugin is None:
            known = ", ".join(sorted(plugins)) or "none installed"
            raise ConfigError(
                f"providers.{name}.type", f"unknown provider type {pconf.type!r} (known: {known})"
            )
        _check_tier(name, pconf.type, pconf.consent, registry)
        providers[name] = plugin.factory(pconf)
    return providers


def _check_tier(name: str, ptype: str, consent: bool, registry: Registry) -> None:
    info = registry.provider_type(ptype)
    tier = info.risk_tier if info is not None else None
    meaning = registry.risk_tiers.get(tier or "", "")
    if tier == "A":
        raise ConfigError(
            f"providers.{name}", f"{ptype} is risk tier A ({meaning}); set enabled to false"
        )
    if tier == "B" and not consent:
        raise ConfigError(
            f"providers.{name}.consent",
            f"{ptype} is risk tier B ({meaning}): your subscription could be revoked for "
            'using it through a proxy. If you accept that, set "consent": true',
        )
