"""The models registry: package data naming models, aliases, context windows, prices,
the provider types OLP knows with their risk tiers, and the types of what provider
plugins declare for detection and setup (`known`)."""

from __future__ import annotations

from olp.registry.known import Known, KnownApi, KnownCli
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
    "Known",
    "KnownApi",
    "KnownCli",
    "ModelInfo",
    "Price",
    "ProviderTypeInfo",
    "Registry",
    "load_registry",
    "registry_from_json",
]
