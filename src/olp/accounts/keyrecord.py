"""One API key as the key store keeps it, and the rules its settings follow."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import orjson

from olp.accounts.identity import Identity, KeyLimits
from olp.errors import InvalidRequest

__all__ = [
    "KEY_ID_PATTERN",
    "MAX_COUNT_LIMIT",
    "NO_LIMITS",
    "RECORD_COLUMNS",
    "KeyRecord",
    "KeyTier",
    "Patterns",
    "check_expiry",
    "check_limits",
    "check_name",
    "check_patterns",
    "check_shares",
    "check_tier",
    "dump_patterns",
    "dump_shares",
    "load_patterns",
    "record_from_row",
]

KeyTier = Literal["owner", "member"]
# None: everything is allowed; else glob patterns (fnmatch, case-sensitive).
Patterns = tuple[str, ...] | None
# (provider, fraction): the part of a provider's usage window a key may use.
Shares = tuple[tuple[str, float], ...]

NO_LIMITS = KeyLimits()
# Far beyond any real limit, and within SQLite's 64-bit integers.
MAX_COUNT_LIMIT = 10**15
# The order `record_from_row` reads.
RECORD_COLUMNS = (
    "id, name, tier, created, last_used, revoked_at, allowed_models, allowed_providers, "
    "rpm, rpd, tpd, usd_month, concurrent, expires_at, rp7d, rp30d, shares"
)
# 9999-12-31: the last time `time.gmtime` and SQLite's date functions both handle.
_LAST_EXPIRY = 253_402_300_800.0
KEY_ID_PATTERN = re.compile(r"^key_[a-z0-9]{8}$")
_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,64}$")
_PATTERN = re.compile(r"^[^\s,\x00-\x1f\x7f]{1,200}$")


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A stored key: everything but its secret (only the SHA-256 of that is kept)."""

    id: str
    name: str
    tier: KeyTier
    created: float
    last_used: float | None = None
    revoked_at: float | None = None
    allowed_models: Patterns = None
    allowed_providers: Patterns = None
    limits: KeyLimits = NO_LIMITS
    expires_at: float | None = None  # None: never
    shares: Shares = ()

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def identity(self) -> Identity:
        return Identity(
            key_id=self.id,
            name=self.name,
            tier=self.tier,
            allowed_models=self.allowed_models,
            allowed_providers=self.allowed_providers,
            limits=self.limits,
            expires_at=self.expires_at,
            shares=self.shares,
        )

    def public(self) -> dict[str, object]:
        """A JSON-ready view for `olp keys list --json` and management endpoints."""
        return {
            "id": self.id,
            "name": self.name,
            "tier": self.tier,
            "created": self.created,
            "last_used": self.last_used,
            "revoked_at": self.revoked_at,
            "expires_at": self.expires_at,
            "allowed_models": _listed(self.allowed_models),
            "allowed_providers": _listed(self.allowed_providers),
            "limits": {
                "rpm": self.limits.rpm,
                "rpd": self.limits.rpd,
                "rp7d": self.limits.rp7d,
                "rp30d": self.limits.rp30d,
                "tpd": self.limits.tpd,
                "usd_month": self.limits.usd_month,
                "concurrent": self.limits.concurrent,
            },
            "shares": dict(self.shares),
        }


def check_name(name: str) -> str:
    name = name.strip()
    if not _NAME.match(name):
        raise InvalidRequest("name: must be 1-64 printable characters", param="name")
    # Ids and names share one argument (`olp keys revoke ID|NAME`): keep them apart.
    if KEY_ID_PATTERN.match(name):
        raise InvalidRequest(
            f"name: {name!r} looks like a key id (key_xxxxxxxx); choose another name",
            param="name",
        )
    return name


def check_tier(tier: str) -> KeyTier:
    if tier == "owner":
        return "owner"
    if tier == "member":
        return "member"
    raise InvalidRequest(f"tier: must be 'owner' or 'member', not {tier!r}", param="tier")


def check_patterns(field: str, patterns: Iterable[str] | None) -> Patterns:
    """Normalise an allow-list: None or ['*'] mean everything; each entry a glob."""
    if patterns is None:
        return None
    items = tuple(p.strip() for p in patterns)
    if not items:
        raise InvalidRequest(
            f"{field}: an empty list would allow nothing; use '*' to allow everything "
            "or revoke the key",
            param=field,
        )
    for item in items:
        if not _PATTERN.match(item):
            raise InvalidRequest(
                f"{field}: {item!r} is not a model/provider name or glob "
                "(no spaces or commas, 1-200 characters)",
                param=field,
            )
    if "*" in items:
        return None
    return tuple(dict.fromkeys(items))


def check_limits(limits: KeyLimits) -> KeyLimits:
    for field in ("rpm", "rpd", "rp7d", "rp30d", "tpd", "concurrent"):
        value = getattr(limits, field)
        if value is not None and (isinstance(value, bool) or not 1 <= value <= MAX_COUNT_LIMIT):
            raise InvalidRequest(
                f"{field}: must be a whole number from 1 to {MAX_COUNT_LIMIT:,} "
                "(or no limit at all)",
                param=field,
            )
    usd = limits.usd_month
    if usd is not None and not (math.isfinite(usd) and usd > 0):
        raise InvalidRequest("usd_month: must be a positive amount", param="usd_month")
    return limits


def check_shares(shares: Iterable[tuple[str, float]]) -> Shares:
    """Each share a provider name and a fraction in (0, 1]; a provider named once."""
    checked: dict[str, float] = {}
    for provider, fraction in shares:
        if not _PATTERN.match(provider) or any(c in provider for c in "*?["):
            raise InvalidRequest(f"share: {provider!r} is not a provider name", param="share")
        if isinstance(fraction, bool) or not (math.isfinite(fraction) and 0 < fraction <= 1):
            raise InvalidRequest(
                f"share: {provider}'s share must be above 0 and at most 1 (or 100%)",
                param="share",
            )
        checked[provider] = float(fraction)
    return tuple(sorted(checked.items()))


def dump_shares(shares: Shares) -> str | None:
    return orjson.dumps(dict(shares)).decode() if shares else None


def _load_shares(text: str | None) -> Shares:
    if text is None:
        return ()
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return ()
    if not isinstance(value, dict):
        return ()
    return tuple(sorted((str(k), float(v)) for k, v in value.items() if isinstance(v, int | float)))


def check_expiry(expires_at: float | None, now: float) -> float | None:
    """A key's expiry: None (never) or a unix time still to come."""
    if expires_at is None:
        return None
    if not math.isfinite(expires_at) or expires_at >= _LAST_EXPIRY:
        raise InvalidRequest("expires: must be a time before 9999-12-31", param="expires")
    if expires_at <= now:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(expires_at))
        raise InvalidRequest(
            f"expires: {when} is already past; to stop a key now, revoke it", param="expires"
        )
    return expires_at


def _listed(patterns: Patterns) -> list[str] | None:
    return None if patterns is None else list(patterns)


def dump_patterns(patterns: Patterns) -> str | None:
    return None if patterns is None else orjson.dumps(list(patterns)).decode()


def load_patterns(text: str | None) -> Patterns:
    if text is None:
        return None
    value = orjson.loads(text)
    return tuple(str(v) for v in value)


def record_from_row(row: Sequence[object]) -> KeyRecord:
    """A `KeyRecord` from a row of `RECORD_COLUMNS`."""
    (
        key_id,
        name,
        tier,
        created,
        last_used,
        revoked_at,
        models,
        providers,
        rpm,
        rpd,
        tpd,
        usd_month,
        concurrent,
        expires_at,
        rp7d,
        rp30d,
        shares,
    ) = row
    return KeyRecord(
        id=str(key_id),
        name=str(name),
        tier=check_tier(str(tier)),
        created=_float(created) or 0.0,
        last_used=_float(last_used),
        revoked_at=_float(revoked_at),
        allowed_models=load_patterns(_text(models)),
        allowed_providers=load_patterns(_text(providers)),
        limits=KeyLimits(
            rpm=_int(rpm),
            rpd=_int(rpd),
            rp7d=_int(rp7d),
            rp30d=_int(rp30d),
            tpd=_int(tpd),
            usd_month=_float(usd_month),
            concurrent=_int(concurrent),
        ),
        expires_at=_float(expires_at),
        shares=_load_shares(_text(shares)),
    )


def _float(value: object) -> float | None:
    # Column affinity (REAL/INTEGER) guarantees numbers; anything else reads as unset.
    return float(value) if isinstance(value, int | float) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _text(value: object) -> str | None:
    return None if value is None else str(value)
