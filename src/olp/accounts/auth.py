"""Turning a request's token into an Identity.

The server depends only on the `Authenticator` protocol; `DbAuthenticator`
(olp.accounts.dbauth) implements it over the owner tokens and the key store.
"""

from __future__ import annotations

from typing import Protocol

from olp.accounts.identity import Identity

__all__ = ["Authenticator", "extract_token"]


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
