"""One record per finished chat request, handed to every observer (ledger, limits, metrics).

Built once at the end of a request from what the handler already knows; observers must be
O(1) and never block (they queue or count in memory).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from olp.accounts import Identity
from olp.accounts.pricing import Cost
from olp.errors import HopFailure
from olp.ir import Usage

__all__ = ["OutcomeObserver", "RequestOutcome"]


@dataclass(slots=True)
class RequestOutcome:
    request_id: str
    started_at: float  # unix seconds
    identity: Identity | None
    requested_model: str
    provider: str  # "none" when no provider answered
    model: str
    hops: int
    cache: str  # hit | miss | bypass
    status: int
    error_code: str | None
    error_message: str | None
    usage: Usage | None
    stream: bool
    latency_ms: float
    ttft_ms: float | None  # time to the first content byte sent to the client
    failures: tuple[HopFailure, ...] = ()
    truncated: bool = False
    # A singleflight follower: answered by another request's upstream call.
    shared: bool = False
    # Priced once, by the first observer that needs it (observers.request_cost).
    cost: Cost | None = None


OutcomeObserver = Callable[[RequestOutcome], None]
