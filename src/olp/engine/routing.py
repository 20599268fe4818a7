"""Model resolution (docs/design.md §3): requested model → an ordered chain of hops."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from olp.config import Config, PoolConfig
from olp.errors import ModelNotFound, NoProviderAvailable
from olp.providers.base import Provider
from olp.registry import Registry

__all__ = ["Chain", "Hop", "Router"]


@dataclass(frozen=True, slots=True)
class Hop:
    index: int
    name: str  # provider name from config
    model: str  # the provider's model id for this hop
    provider: Provider
    pool: PoolConfig | None = None  # set on each member of a pool hop


@dataclass(frozen=True, slots=True)
class Chain:
    name: str  # what the client asked for
    hops: tuple[Hop, ...]

    def providers(self) -> list[str]:
        return [hop.name for hop in self.hops]

    def only(self, providers: list[str]) -> Chain:
        """The same chain without the hops whose provider is not in `providers`."""
        if len(providers) == len(self.hops):
            return self
        return self.where(lambda hop: hop.name in providers)

    def where(self, keep: Callable[[Hop], bool]) -> Chain:
        """The same chain with only the hops `keep` says yes to."""
        hops = tuple(hop for hop in self.hops if keep(hop))
        return self if len(hops) == len(self.hops) else Chain(self.name, hops)


class Router:
    """Resolves names once per distinct model and remembers the answer."""

    def __init__(
        self, config: Config, registry: Registry, providers: Mapping[str, Provider]
    ) -> None:
        self._config = config
        self._registry = registry
        self._providers = providers
        self._declared: dict[str, str] = {}
        for name, pconf in config.providers.items():
            if name in providers:
                for model in pconf.models:
                    self._declared.setdefault(model, name)
        self._resolved: dict[str, Chain] = {}

    def resolve(self, model: str) -> Chain:
        chain = self._resolved.get(model)
        if chain is None:
            chain = self._resolve(model)
            if len(self._resolved) < 10_000:  # bounded: `provider/<anything>` is open-ended
                self._resolved[model] = chain
        return chain

    def _resolve(self, model: str) -> Chain:
        configured = self._config.routing.chains.get(model)
        if configured is not None:
            return self._chain(model, [(h.provider, h.model, h.pool) for h in configured])
        canonical = self._registry.canonical(model) or model
        if canonical in self._declared:
            return self._chain(model, [(self._declared[canonical], canonical, None)])
        if model in self._declared:
            return self._chain(model, [(self._declared[model], model, None)])
        provider, sep, rest = model.partition("/")
        if sep and rest and provider in self._config.providers:
            return self._chain(model, [(provider, rest, None)])
        raise ModelNotFound(
            f"The model {model!r} does not exist on this OLP: it is not a configured chain, "
            "a registry alias, a model a provider declares, or provider/model. "
            "GET /v1/models lists what you can use.",
            param="model",
        )

    def _chain(self, model: str, hops: list[tuple[str, str, PoolConfig | None]]) -> Chain:
        live = [hop for hop in hops if hop[0] in self._providers]
        if not live:
            names = ", ".join(name for name, _, _ in hops)
            raise NoProviderAvailable(
                f"Every provider for model {model!r} is disabled ({names}). "
                "Enable one in config.json.",
                param="model",
            )
        return Chain(
            model,
            tuple(
                Hop(i, name, m, self._providers[name], pool)
                for i, (name, m, pool) in enumerate(live)
            ),
        )

    def model_ids(self) -> list[tuple[str, str]]:
        """(model id, owner) pairs a client may ask for: chains, declared models, aliases."""
        seen: dict[str, str] = {}
        for name, hops in self._config.routing.chains.items():
            if any(h.provider in self._providers for h in hops):
                seen.setdefault(name, "olp")
        for model, provider in self._declared.items():
            seen.setdefault(model, provider)
        for alias, canonical in self._registry.aliases.items():
            if canonical in self._declared:
                seen.setdefault(alias, self._declared[canonical])
        return list(seen.items())
