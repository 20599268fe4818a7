"""Who is calling: identities, API keys and the authenticator the server asks."""

from __future__ import annotations

from olp.accounts.access import allowed, check_access, usable_providers
from olp.accounts.auth import Authenticator, extract_token
from olp.accounts.identity import ANONYMOUS, Identity, KeyLimits, Tier
from olp.accounts.owner_key import OwnerKeyFile, generate_key, hash_key

__all__ = [
    "ANONYMOUS",
    "Authenticator",
    "Identity",
    "KeyLimits",
    "OwnerKeyFile",
    "Tier",
    "allowed",
    "check_access",
    "extract_token",
    "generate_key",
    "hash_key",
    "usable_providers",
]
