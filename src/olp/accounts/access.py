"""Which models and providers an identity may use (members' allow-lists, with globs)."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from olp.accounts.identity import Identity
from olp.errors import Forbidden

__all__ = ["allowed", "check_access", "usable_providers"]


def allowed(patterns: tuple[str, ...] | None, value: str) -> bool:
    return patterns is None or any(fnmatchcase(value, p) for p in patterns)


def usable_providers(identity: Identity, providers: Sequence[str]) -> list[str]:
    return [p for p in providers if allowed(identity.allowed_providers, p)]


def check_access(identity: Identity, model: str, providers: Sequence[str]) -> None:
    """Raise 403 model_not_allowed unless the key may use `model` through some provider."""
    if not allowed(identity.allowed_models, model):
        raise Forbidden(
            f"This key may not use model {model!r}. Ask the owner to allow it "
            "(olp keys set <key> --models ...).",
            param="model",
        )
    if not usable_providers(identity, providers):
        raise Forbidden(
            f"This key may not use any provider serving {model!r} "
            f"({', '.join(providers)}). Ask the owner to allow one.",
            param="model",
        )
