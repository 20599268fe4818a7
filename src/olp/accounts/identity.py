"""An authenticated caller and what it may use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ANONYMOUS", "OWNER_TOKEN_IDENTITY", "Identity", "KeyLimits", "Tier"]

Tier = Literal["owner", "member", "anonymous"]


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """Per-key limits; None means unlimited."""

    rpm: int | None = None  # requests per minute
    rpd: int | None = None  # requests per day (UTC)
    rp7d: int | None = None  # requests in the last 7 UTC days, today included (rolling)
    rp30d: int | None = None  # requests in the last 30 UTC days, today included (rolling)
    tpd: int | None = None  # tokens per day (UTC), prompt + completion
    usd_month: float | None = None  # API-equivalent USD per calendar month (UTC)
    concurrent: int | None = None  # requests in progress at once

    def any(self) -> bool:
        # Asked on every request: no generator over the fields.
        return (
            self.rpm is not None
            or self.rpd is not None
            or self.rp7d is not None
            or self.rp30d is not None
            or self.tpd is not None
            or self.usd_month is not None
            or self.concurrent is not None
        )


@dataclass(frozen=True, slots=True)
class Identity:
    key_id: str  # stable id: the cache namespace and the ledger's key column
    name: str
    tier: Tier
    # None: everything; else glob patterns (members' allow-lists, from the key store).
    allowed_models: tuple[str, ...] | None = None
    allowed_providers: tuple[str, ...] | None = None
    limits: KeyLimits = KeyLimits()
    expires_at: float | None = None  # unix time from which the key no longer works
    # (provider, fraction 0..1): the part of that provider's usage window the key may use.
    shares: tuple[tuple[str, float], ...] = ()

    @property
    def is_owner(self) -> bool:
        return self.tier == "owner"


ANONYMOUS = Identity(key_id="anonymous", name="anonymous", tier="anonymous")
# Whoever holds an owner token (OLP_OWNER_TOKEN, the generated owner key): not a keys.db row.
OWNER_TOKEN_IDENTITY = Identity(key_id="owner", name="owner", tier="owner")
