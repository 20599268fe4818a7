"""The models registry: package data naming models, aliases, context windows, prices,
and the provider types OLP knows with their risk tiers."""

from __future__ import annotations

from olp.registry.models import (
    RISK_TIERS,
    ModelInfo,
    Price,
    ProviderTypeInfo,
    Registry,
    load_registry,
    registry_from_json,
)

__all__ = [
    "RISK_TIERS",
    "ModelInfo",
    "Price",
    "ProviderTypeInfo",
    "Registry",
    "load_registry",
    "registry_from_json",
]
