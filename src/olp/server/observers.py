"""What happens after a request: the ledger row, the key's usage, the attempt rows.

Each observer is O(1): the ledger only queues (its writer thread does the I/O), the limit
keeper only adds to counters.
"""

from __future__ import annotations

import time

from olp.accounts.ledger import Ledger
from olp.accounts.ledger_rows import AttemptRecord, RequestRecord
from olp.accounts.limits import LimitKeeper
from olp.accounts.pricing import NO_COST, Cost, Pricing
from olp.accounts.shares import WindowUse
from olp.config import Config
from olp.engine import Attempt, AttemptListener
from olp.server.context import AppContext
from olp.server.outcome import OutcomeObserver, RequestOutcome

__all__ = ["ledger_attempts", "ledger_requests", "limit_usage", "record_usage", "window_usage"]


def request_cost(outcome: RequestOutcome, pricing: Pricing, config: Config) -> Cost:
    """Cost goes to the provider that answered (docs/design.md §5); a replay or shared call
    is free.

    Computed once per request and kept on the outcome: the ledger and the key's USD
    counter both need it.
    """
    if outcome.cost is None:
        outcome.cost = _price(outcome, pricing, config)
    return outcome.cost


def _price(outcome: RequestOutcome, pricing: Pricing, config: Config) -> Cost:
    if outcome.provider == "none" or outcome.cache == "hit" or outcome.shared:
        return NO_COST
    pconf = config.providers.get(outcome.provider)
    ptype = pconf.type if pconf is not None else ""
    return pricing.price_request(outcome.provider, ptype, outcome.model, outcome.usage)


def record_usage(ctx: AppContext, on: bool) -> None:
    """Write ledger rows (a request's, its attempts') from the next request on, or stop.

    `ledger.enabled`, at start and at each config reload. The ledger itself stays open
    either way: the dashboard and `olp usage` read what it holds. (A request under way at
    the switch may leave its attempt rows without its request row, or the reverse.)
    """
    hooks = ctx.ledger_hooks
    if on and hooks is None:
        attempts, requests = ledger_attempts(ctx.ledger), ledger_requests(ctx.ledger, ctx)
        ctx.engine.listeners.append(attempts)
        ctx.observers.append(requests)
        ctx.ledger_hooks = attempts, requests
    elif not on and hooks is not None:
        ctx.engine.listeners.remove(hooks[0])
        ctx.observers.remove(hooks[1])
        ctx.ledger_hooks = None


def ledger_requests(ledger: Ledger, ctx: AppContext) -> OutcomeObserver:
    """A ledger row per request; prices and providers are read from `ctx` at the time (a
    config reload replaces them)."""

    def observe(outcome: RequestOutcome) -> None:
        identity = outcome.identity
        if identity is None:
            # Refused before we knew who asked (401): a flood of bad tokens must not grow
            # the ledger; /metrics still counts them.
            return
        answered = outcome.provider != "none" and outcome.error_code is None
        ledger.record_request(
            RequestRecord(
                request_id=outcome.request_id,
                key_id=identity.key_id,
                key_name=identity.name,
                requested_model=outcome.requested_model,
                provider=outcome.provider if answered else None,
                model=outcome.model if answered else None,
                status=outcome.status,
                hops=outcome.hops,
                cache=outcome.cache,
                error_code=outcome.error_code,
                usage=outcome.usage,
                cost=request_cost(outcome, ctx.pricing, ctx.config) if answered else NO_COST,
                latency_ms=outcome.latency_ms,
                ttft_ms=outcome.ttft_ms,
                stream=outcome.stream,
                ts=outcome.started_at,
            )
        )

    return observe


def ledger_attempts(ledger: Ledger) -> AttemptListener:
    """One row per hop a request tried at a provider; a cache replay tried none.

    The request's own row says it was a hit (`cache`) and which hop's answer it replayed.
    """

    def listen(attempt: Attempt) -> None:
        if attempt.replay:
            return
        ledger.record_attempt(
            AttemptRecord(
                request_id=attempt.request_id,
                hop=attempt.hop,
                provider=attempt.provider,
                model=attempt.model,
                outcome=attempt.outcome,
                code=attempt.failure.value if attempt.failure else None,
                trigger=attempt.trigger or None,
                latency_ms=attempt.latency_ms,
                chain=attempt.chain,
            )
        )

    return listen


def limit_usage(limits: LimitKeeper, ctx: AppContext) -> OutcomeObserver:
    """Tokens and API-equivalent USD a key consumed count against its daily/monthly limits."""

    def observe(outcome: RequestOutcome) -> None:
        if outcome.identity is None or outcome.usage is None:
            return
        if outcome.cache == "hit" or outcome.shared:
            return  # answered without an upstream call: nothing consumed
        cost = request_cost(outcome, ctx.pricing, ctx.config)
        limits.on_usage(
            outcome.identity.key_id, outcome.usage.total_tokens, cost.api_cost_usd or 0.0
        )

    return observe


def window_usage(use: WindowUse) -> OutcomeObserver:
    """What each key sent each provider, for the keys' shares of its usage window."""

    def observe(outcome: RequestOutcome) -> None:
        if outcome.identity is None or outcome.provider == "none" or outcome.status >= 400:
            return
        if outcome.cache == "hit" or outcome.shared:
            return  # no upstream call of its own: the window was not used
        tokens = outcome.usage.total_tokens if outcome.usage is not None else None
        use.record(outcome.provider, outcome.identity.key_id, tokens, time.time())

    return observe
