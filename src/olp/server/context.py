"""Everything a request handler needs, built once by `create_app`.

What a request reads of the configuration is one immutable `Snapshot`: the `Config`, the
providers, the router, the prices and the engine tuned by it. A config reload
(`olp.server.reload`) builds a new one and swaps it in with one assignment; a request
reads `ctx.live` once, at its start, and keeps that snapshot to its end.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from olp.accounts import Authenticator, Identity, check_access, extract_token, usable_providers
from olp.accounts.ledger import Ledger
from olp.accounts.limits import LimitKeeper
from olp.accounts.pricing import Pricing
from olp.accounts.shares import WindowUse
from olp.cache import ResponseCache
from olp.config import Config
from olp.engine import AttemptListener, Chain, FallbackEngine, Hop, PoolScheduler, Router
from olp.errors import UnpricedModel
from olp.providers.base import Provider, ProviderPlugin
from olp.quota import Cooldowns, QuotaBook
from olp.registry import Registry
from olp.server.asgi import Request
from olp.server.health_checks import HealthChecks
from olp.server.metrics import Metrics
from olp.server.outcome import OutcomeObserver

__all__ = ["AppContext", "ConfigStatus", "Snapshot"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The running configuration and what is built from it; never changed in place."""

    config: Config
    providers: Mapping[str, Provider]
    router: Router
    pricing: Pricing
    # (Its retry settings come from `config.routing`; cooldowns, gates and listeners are
    # shared by every snapshot's engine.)
    engine: FallbackEngine

    def authorize(self, identity: Identity, chain: Chain) -> Chain:
        """403 unless the key may use this model; drop the hops it may not use.

        Those are the hops of providers outside the key's allow-list and, for a key with
        a monthly USD budget, the hops whose cost OLP could not count: a budget fails
        closed rather than count an unknown cost as $0.
        """
        providers = chain.providers()
        check_access(identity, chain.name, providers)
        if identity.allowed_providers is not None:
            chain = chain.only(usable_providers(identity, providers))
        if identity.limits.usd_month is None:
            return chain
        priced = chain.where(self._can_price)
        if not priced.hops:
            raise UnpricedModel(_unpriced_message(chain))
        return priced

    def _can_price(self, hop: Hop) -> bool:
        return self.pricing.counts_cost(hop.name, hop.provider, hop.model)


@dataclass(slots=True)
class ConfigStatus:
    """What the owner sees of config.json's reloads (`olp.server.reload`) in the status."""

    loaded_at: float = field(default_factory=time.time)
    reloads: int = 0  # applied since start
    # Sections of the file that differ from the running ones until a restart (server, …).
    restart_needed: tuple[str, ...] = ()
    # The last reload that failed, until one succeeds: what was wrong, and when.
    reload_error: str | None = None
    reload_error_at: float | None = None


@dataclass(slots=True)
class AppContext:
    live: Snapshot  # replaced whole by a config reload, never changed in place
    registry: Registry
    cooldowns: Cooldowns
    auth: Authenticator
    quota: QuotaBook
    pools: PoolScheduler
    ledger: Ledger
    cache: ResponseCache
    version: str
    started_at: float = field(default_factory=time.time)
    # The provider types this OLP can build (a config reload builds new providers).
    plugins: Mapping[str, ProviderPlugin] = field(default_factory=dict)
    config_status: ConfigStatus = field(default_factory=ConfigStatus)
    # Told about every finished chat request (ledger, limits, metrics); O(1) each.
    observers: list[OutcomeObserver] = field(default_factory=list)
    # The ledger's hook among the engine's listeners and among `observers`, while
    # `ledger.enabled` (`olp.server.observers.record_usage` adds and removes them).
    ledger_hooks: tuple[AttemptListener, OutcomeObserver] | None = None
    # Per-key limits (requests/min, /day, tokens/day, USD/month), counted in memory.
    limits: LimitKeeper = field(default_factory=LimitKeeper)
    # Who sent what to each provider in the last five hours: keys' shares of windows.
    window_use: WindowUse = field(default_factory=WindowUse)
    # In-memory request metrics (fed by an outcome observer and an engine listener) and
    # the last provider health checks: what /metrics, status and the dashboard read.
    metrics: Metrics = field(default_factory=Metrics)
    health_checks: HealthChecks = field(default_factory=HealthChecks)

    def token(self, req: Request) -> str | None:
        return extract_token(req.header(b"authorization"), req.header(b"x-api-key"))

    # What handlers outside the chat path read: the running snapshot's parts.
    @property
    def config(self) -> Config:
        return self.live.config

    @property
    def providers(self) -> Mapping[str, Provider]:
        return self.live.providers

    @property
    def router(self) -> Router:
        return self.live.router

    @property
    def pricing(self) -> Pricing:
        return self.live.pricing

    @property
    def engine(self) -> FallbackEngine:
        return self.live.engine

    def authorize(self, identity: Identity, chain: Chain) -> Chain:
        return self.live.authorize(identity, chain)


def _unpriced_message(chain: Chain) -> str:
    models = ", ".join(dict.fromkeys(f"{hop.name}/{hop.model}" for hop in chain.hops))
    return (
        f"This key has a monthly USD budget, and OLP has no price for {models}: it could "
        "not count what this request costs, so it does not send it. The owner can add a "
        'price under "pricing" in config.json ({"input": 0, "output": 0} for a free local '
        "model) or remove the key's USD limit (olp keys set <key> --usd-month none)."
    )
