"""What a request cost: real money, and what it would have cost at API list prices.

Two figures per request, both attributed to the provider that answered (docs/design.md §5,
rule 6):

- `api_cost_usd`: the API-equivalent cost — the provider's own figure when it reports one
  (a CLI's `total_cost_usd`, OpenRouter's `usage.cost`), else tokens × list price.
- `cost_usd`: the money actually spent — `api_cost_usd` for metered providers (API keys),
  0 for subscription providers (a flat plan costs nothing more per request).

Per-key USD/month limits count `api_cost_usd`: a family member's share of a subscription
is worth its API price, and a limit that only counted metered spend would let a member use
a subscription without bound.

A price OLP does not know is `None`, never 0: a budget must be able to tell "free" from
"unknown" (fail closed), and the owner sees "unknown" in `olp usage`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from olp.config import Config, PriceOverride
from olp.ir import Usage
from olp.providers.base import Provider
from olp.registry import Price, Registry

__all__ = [
    "ANTHROPIC_CACHE_WRITE_FACTOR",
    "NO_COST",
    "Billing",
    "Cost",
    "CostSource",
    "Pricing",
    "UnitPrice",
    "token_cost",
]

Billing = Literal["metered", "subscription"]
# Where `api_cost_usd` came from. "none": nothing was spent (failure, cache hit).
CostSource = Literal["provider", "config", "registry", "unknown", "none"]

# Anthropic bills prompt-cache writes (5-minute TTL) at 1.25x the input price. 1-hour
# writes cost 2x, but no usage report says which TTL was used: 1.25x is the common case.
ANTHROPIC_CACHE_WRITE_FACTOR = 1.25
_PER_TOKEN = 1e-6  # prices are USD per million tokens


@dataclass(frozen=True, slots=True)
class Cost:
    cost_usd: float | None
    api_cost_usd: float | None
    source: CostSource


# A request no provider answered, or one served from OLP's cache: nothing spent.
NO_COST = Cost(0.0, 0.0, "none")


@dataclass(frozen=True, slots=True)
class UnitPrice:
    """USD per million tokens, and what a cache write costs relative to input."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write_factor: float = 1.0


def token_cost(usage: Usage, price: UnitPrice) -> float:
    """USD for `usage` at `price`.

    `prompt_tokens` includes cache reads and writes (the IR's convention), so only the
    rest is billed at the plain input price; cache reads cost `cached_input` (the input
    price when the vendor lists none); cache writes cost input × `cache_write_factor`.
    Reasoning tokens are already inside `completion_tokens` and are not added again.
    """
    cached = max(usage.cached_prompt_tokens, 0)
    written = max(usage.cache_write_tokens, 0)
    plain = max(usage.prompt_tokens - cached - written, 0)
    cached_price = price.input if price.cached_input is None else price.cached_input
    dollars = (
        plain * price.input
        + cached * cached_price
        + written * price.input * price.cache_write_factor
        + max(usage.completion_tokens, 0) * price.output
    )
    return dollars * _PER_TOKEN


_MAX_PLANS = 4096


class Pricing:
    """Prices requests from the registry's list prices and config.json's `pricing`."""

    def __init__(self, registry: Registry, config: Config) -> None:
        self._registry = registry
        self._config = config
        self._plans: dict[
            tuple[str, str, str], tuple[Billing, tuple[UnitPrice, CostSource] | None]
        ] = {}

    def billing(self, provider_name: str, provider_type: str) -> Billing:
        """The provider's `billing` setting, else by type: CLIs are subscriptions."""
        pconf = self._config.providers.get(provider_name)
        if pconf is not None and pconf.billing is not None:
            return pconf.billing
        info = self._registry.provider_type(provider_type)
        is_cli = info.command is not None if info is not None else provider_type.endswith("-cli")
        return "subscription" if is_cli else "metered"

    def unit_price(
        self, provider_name: str, provider_type: str, model: str
    ) -> tuple[UnitPrice, CostSource] | None:
        """The price of `model` on this provider, and whether config or registry set it."""
        canonical = self._registry.canonical(model) or model
        info = self._registry.model(canonical)
        vendor = info.vendor if info is not None else self._type_vendor(provider_type)
        factor = ANTHROPIC_CACHE_WRITE_FACTOR if vendor == "anthropic" else 1.0
        override = self._override(provider_name, model, canonical)
        if override is not None:
            return _unit(override, factor), "config"
        if info is not None and info.price is not None:
            return _unit(info.price, factor), "registry"
        return None

    def price_request(
        self, provider_name: str, provider_type: str, model: str, usage: Usage | None
    ) -> Cost:
        """The cost of one answered request (`model` as sent to that provider)."""
        billing, priced = self._plan(provider_name, provider_type, model)
        api_cost: float | None
        source: CostSource
        if usage is not None and usage.cost_usd is not None:
            api_cost, source = max(usage.cost_usd, 0.0), "provider"
        elif priced is None or usage is None:
            # No usage report at all: the tokens, and so the cost, are unknown.
            api_cost, source = None, "unknown"
        else:
            api_cost, source = token_cost(usage, priced[0]), priced[1]
        if billing == "subscription":
            return Cost(0.0, api_cost, source)
        return Cost(api_cost, api_cost, source)

    def can_price(self, provider_name: str, provider_type: str, model: str) -> bool:
        """Whether a price table (config.json's or the registry's) prices `model` there."""
        return self._plan(provider_name, provider_type, model)[1] is not None

    def counts_cost(self, provider_name: str, provider: Provider, model: str) -> bool:
        """Whether OLP can count what a request for `model` there costs: a price table has
        it, or the provider reports each answer's cost itself. A USD budget needs this."""
        if provider.capabilities.reports_cost:
            return True
        pconf = self._config.providers.get(provider_name)
        return self.can_price(provider_name, pconf.type if pconf else "", model)

    def _plan(
        self, provider_name: str, provider_type: str, model: str
    ) -> tuple[Billing, tuple[UnitPrice, CostSource] | None]:
        # Asked for every answered request (ledger row and USD limit) and, for keys with a
        # USD budget, every hop before it runs: the billing mode and unit price depend only
        # on the frozen config and registry, so look them up once per (provider, type,
        # model), not per request.
        plan_key = (provider_name, provider_type, model)
        plan = self._plans.get(plan_key)
        if plan is None:
            if len(self._plans) >= _MAX_PLANS:  # model names can come from requests
                self._plans.clear()
            plan = self._plans[plan_key] = (
                self.billing(provider_name, provider_type),
                self.unit_price(provider_name, provider_type, model),
            )
        return plan

    def _override(self, provider_name: str, model: str, canonical: str) -> PriceOverride | None:
        pricing = self._config.pricing
        for key in (
            f"{provider_name}/{model}",
            f"{provider_name}/{canonical}",
            model,
            canonical,
        ):
            found = pricing.get(key)
            if found is not None:
                return found
        return None

    def _type_vendor(self, provider_type: str) -> str | None:
        info = self._registry.provider_type(provider_type)
        return info.vendor if info is not None else None


def _unit(price: Price | PriceOverride, factor: float) -> UnitPrice:
    return UnitPrice(price.input, price.output, price.cached_input, factor)
