"""Turning a request's token into an Identity.

The server depends only on the `Authenticator` protocol; the trunk's static
implementation knows the owner token and the owner key, the key store (SQLite) will
plug in behind the same protocol.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import Protocol

from olp.accounts.identity import ANONYMOUS, OWNER_TOKEN_IDENTITY, Identity
from olp.errors import AuthRequired, InvalidApiKey

__all__ = ["Authenticator", "StaticAuthenticator", "extract_token"]

_NO_TOKEN = (
    'OLP API key required: send "Authorization: Bearer <key>" or "x-api-key: <key>". '
    "The owner key was printed when `olp start` first ran; set OLP_OWNER_TOKEN to use "
    "your own."
)
_BAD_TOKEN = "OLP API key is invalid or has been revoked."


class Authenticator(Protocol):
    def authenticate(self, token: str | None) -> Identity:
        """The caller behind `token` (None: no token sent); raise AuthRequired/InvalidApiKey."""
        ...


def extract_token(authorization: bytes | None, x_api_key: bytes | None) -> str | None:
    """`Authorization: Bearer <t>` first, then `x-api-key: <t>`."""
    if authorization:
        scheme, _, value = authorization.decode("latin-1").strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    if x_api_key:
        value = x_api_key.decode("latin-1").strip()
        if value:
            return value
    return None


class StaticAuthenticator:
    """Owner tokens known at start (OLP_OWNER_TOKEN, the generated owner key)."""

    def __init__(self, owner_hashes: Iterable[str], *, allow_anonymous: bool) -> None:
        self._owner_hashes = [bytes.fromhex(h) for h in owner_hashes]
        self._allow_anonymous = allow_anonymous

    def authenticate(self, token: str | None) -> Identity:
        if token is None:
            if self._allow_anonymous:
                return ANONYMOUS
            raise AuthRequired(_NO_TOKEN)
        digest = hashlib.sha256(token.encode()).digest()
        # Compare against every hash, always: no early exit to time.
        matched = False
        for known in self._owner_hashes:
            matched |= hmac.compare_digest(digest, known)
        if matched:
            return OWNER_TOKEN_IDENTITY
        raise InvalidApiKey(_BAD_TOKEN)
