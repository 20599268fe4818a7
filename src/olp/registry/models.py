"""Load `models.json` (shipped in the package) into a lookup-friendly, frozen Registry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any

import orjson

__all__ = [
    "RISK_TIERS",
    "ModelInfo",
    "Price",
    "ProviderTypeInfo",
    "Registry",
    "load_registry",
    "registry_from_json",
]

# Most permissive last; "A" types can never be enabled (docs/design.md §1).
RISK_TIERS = ("A", "B", "C", "D")
_DEFAULT_CREATED = 1_735_689_600  # 2025-01-01, for entries that do not say


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cached_input: float | None = None


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    vendor: str
    context_window: int | None = None
    price: Price | None = None
    aliases: tuple[str, ...] = ()
    created: int = _DEFAULT_CREATED


@dataclass(frozen=True, slots=True)
class ProviderTypeInfo:
    """What OLP knows about a provider *type* (not a configured provider)."""

    type: str
    vendor: str
    risk_tier: str  # one of RISK_TIERS
    note: str = ""
    # Default executable for CLI types; None for HTTP types.
    command: str | None = None


def _empty() -> MappingProxyType[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Registry:
    models: MappingProxyType[str, ModelInfo] = field(default_factory=_empty)
    aliases: MappingProxyType[str, str] = field(default_factory=_empty)
    provider_types: MappingProxyType[str, ProviderTypeInfo] = field(default_factory=_empty)
    # Tier letter → what it means, for `olp doctor`.
    risk_tiers: MappingProxyType[str, str] = field(default_factory=_empty)
    # When the prices were taken, and where from (models.json "as_of" / "_source").
    as_of: str = ""
    source: str = ""

    def canonical(self, name: str) -> str | None:
        """The canonical model id an alias (or a canonical id) stands for."""
        if name in self.models:
            return name
        return self.aliases.get(name)

    def model(self, model_id: str) -> ModelInfo | None:
        return self.models.get(model_id)

    def provider_type(self, type_name: str) -> ProviderTypeInfo | None:
        return self.provider_types.get(type_name)


def load_registry() -> Registry:
    raw = orjson.loads(resources.files("olp.registry").joinpath("models.json").read_bytes())
    return registry_from_json(raw)


def registry_from_json(raw: Mapping[str, Any]) -> Registry:
    """Build a Registry; ValueError if ids or aliases clash (a clash would shadow silently)."""
    models: dict[str, ModelInfo] = {}
    aliases: dict[str, str] = {}
    for entry in raw.get("models", []):
        info = _model(entry)
        if info.id in models:
            raise ValueError(f"models registry: model {info.id!r} is listed twice")
        models[info.id] = info
        for alias in info.aliases:
            if alias in aliases:
                raise ValueError(
                    f"models registry: alias {alias!r} names both "
                    f"{aliases[alias]!r} and {info.id!r}"
                )
            aliases[alias] = info.id
    shadowed = sorted(set(aliases) & set(models))
    if shadowed:
        raise ValueError(f"models registry: aliases equal to model ids: {', '.join(shadowed)}")
    types = {name: _provider_type(name, e) for name, e in raw.get("providers", {}).items()}
    return Registry(
        models=MappingProxyType(models),
        aliases=MappingProxyType(aliases),
        provider_types=MappingProxyType(types),
        risk_tiers=MappingProxyType(dict(raw.get("risk_tiers", {}))),
        as_of=str(raw.get("as_of", "")),
        source=str(raw.get("_source", "")),
    )


def _model(entry: Mapping[str, Any]) -> ModelInfo:
    price = entry.get("price")
    return ModelInfo(
        id=entry["id"],
        vendor=entry["vendor"],
        context_window=entry.get("context_window"),
        price=Price(**price) if price else None,
        aliases=tuple(entry.get("aliases", ())),
        created=entry.get("created", _DEFAULT_CREATED),
    )


def _provider_type(name: str, entry: Mapping[str, Any]) -> ProviderTypeInfo:
    tier = entry["risk_tier"]
    if tier not in RISK_TIERS:
        raise ValueError(f"models registry: provider type {name!r}: unknown risk tier {tier!r}")
    return ProviderTypeInfo(
        type=name,
        vendor=entry["vendor"],
        risk_tier=tier,
        note=entry.get("note", ""),
        command=entry.get("command"),
    )
