"""What a provider plugin declares about the upstreams it can reach without a config file.

Each provider package declares these facts once, in its `ProviderPlugin` (`cli=` for a
subscription CLI, `apis=` for the well-known servers of an HTTP API type). The composing
layer collects them from the installed plugins into `Known`; config-less detection
(`olp.config.detect`), `olp setup` and `olp doctor` read them from there. The types live
here, below both the config and the providers, so each layer can read them.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["Known", "KnownApi", "KnownCli"]


@dataclass(frozen=True, slots=True)
class KnownApi:
    """A well-known server of an HTTP API type, found by its API-key variable."""

    name: str  # the provider name detection and setup give it
    key_env: str  # the variable holding its API key
    base_url: str
    # A few well-known models so plain model names resolve without a config file;
    # `name/<any-model>` always works too.
    models: tuple[str, ...] = ()
    default_model: str | None = None  # its hop in setup's `default` chain
    # The variable the vendor's own SDK reads its endpoint from (a gateway, a regional
    # endpoint, a corporate proxy): honoured here too, so OLP goes where the SDK would.
    base_url_env: str | None = None
    # Resells other vendors' models: last in setup's `default` chain.
    aggregator: bool = False

    def endpoint(self, env: Mapping[str, str]) -> tuple[str, str | None]:
        """(the base URL to use, a note when `base_url_env` was set but not usable)."""
        if self.base_url_env is None or not env.get(self.base_url_env, "").strip():
            return self.base_url, None
        value = env[self.base_url_env].strip()
        parts = urllib.parse.urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            note = f"{self.base_url_env}={value!r} is not an http(s) URL: using {self.base_url}"
            return self.base_url, note
        return value.rstrip("/"), None


@dataclass(frozen=True, slots=True)
class KnownCli:
    """A subscription CLI: found when its executable is on PATH and its login in HOME."""

    name: str  # the provider name detection and setup give it
    command: str  # the executable's usual name
    product: str  # what the owner pays for, in words
    # Files under HOME whose presence means "logged in" (any one of them).
    credential_files: tuple[str, ...]
    login_hint: str  # what to run when it is not logged in
    models: tuple[str, ...]  # declared in `models`, so plain names resolve to it
    default_model: str  # its hop in setup's `default` chain
    # Variables that log the CLI in too; setup passes them to the child through the
    # provider's `env` as `${VAR}`, because OLP scrubs a CLI child's environment.
    login_env: tuple[str, ...] = ()


def _no_tiers() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Known:
    """The installed provider types and what their plugins declare, in plugin order."""

    types: frozenset[str] = frozenset()
    clis: tuple[tuple[str, KnownCli], ...] = ()  # (provider type, facts)
    apis: tuple[tuple[str, KnownApi], ...] = ()
    # Provider type → risk tier letter (from the models registry; unknown types absent).
    tiers: Mapping[str, str] = field(default_factory=_no_tiers)

    def tier(self, ptype: str) -> str:
        """The type's risk tier, "?" when the registry does not know it."""
        return self.tiers.get(ptype, "?")
