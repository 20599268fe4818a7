"""Run a chain with the first-chunk rule (docs/design.md §5).

`FallbackEngine.open()` walks the chain until a hop yields its first content event (or
finishes cleanly): that hop is *committed* and returned as a `Served` stream. Failures
before that move on to the next hop as the trigger table says; nothing a failed hop
produced ever reaches the client. After commit, a failure ends the answer with
`finish_reason: "length"` (rule 3) — it is never retried.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from olp.engine.classify import RATE_OR_QUOTA, SKIPS, decide
from olp.engine.routing import Chain, Hop
from olp.engine.sources import CacheScope, HopSource, find_cached, start
from olp.errors import ChainFailed, Failure, HopFailure, ProviderError
from olp.ir import ChatRequest, Event, Finish, is_content
from olp.observability import event_logger
from olp.quota import Cooldowns

__all__ = ["Attempt", "AttemptListener", "FallbackEngine", "HopGate", "Served"]

log = event_logger("olp.engine")

Outcome = Literal["served", "failed", "skipped", "truncated", "cancelled"]
# How a committed hop's answer ended: whole, cut short by a failure after commit, or cut
# off (the client left, or OLP is stopping) while it was being read.
Ending = Literal["served", "truncated", "cancelled"]


@dataclass(slots=True)
class Attempt:
    """One hop's part in a request, for logs, the ledger and quota counters."""

    request_id: str
    chain: str
    hop: int
    provider: str
    model: str
    outcome: Outcome
    failure: Failure | None = None
    message: str = ""
    trigger: str = ""  # "fallback", "skip", "stop" for failures
    latency_ms: float = 0.0
    # A request of this one's own reached the provider (not skipped, not a cache replay,
    # not another request's shared call): what quota counters count.
    upstream: bool = True
    # Served from a stored answer: no provider was asked, by this request or another.
    replay: bool = False


# Checked before a hop runs; a returned error skips the hop without a request.
HopGate = Callable[[Hop], ProviderError | None]
AttemptListener = Callable[[Attempt], None]


@dataclass(slots=True)
class Served:
    """The committed hop's stream. Iterate `events()` exactly once (or take `whole()`),
    then hand it to `FallbackEngine.report`.
    """

    chain: Chain
    hop: Hop
    failures: tuple[HopFailure, ...]
    head: list[Event]
    rest: AsyncIterator[Event] | None
    request_id: str
    started: float
    source: HopSource
    # How the answer ended (`Ending`; `error` for "truncated"); None while `events()` has
    # not ended, or was never read.
    ended: Ending | None = None
    error: ProviderError | None = None
    _closed: bool = field(default=False, repr=False)

    @property
    def truncated(self) -> bool:
        return self.ended == "truncated"

    async def events(self) -> AsyncGenerator[Event, None]:
        """The answer's events; close it (`contextlib.aclosing`) if you stop early."""
        try:
            async for event in self._events():
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            # Cut off: the client left, or OLP is stopping. The attempt still happened
            # (unless the answer had already ended: then it was served).
            if self.ended is None:
                self.ended = "cancelled"
            raise

    async def _events(self) -> AsyncIterator[Event]:
        finished = False
        for event in self.head:
            finished = finished or isinstance(event, Finish)
            yield event
        if self.rest is not None:
            try:
                async for event in self.rest:
                    finished = finished or isinstance(event, Finish)
                    yield event
            except Exception as raw:
                # Rule 3: content already reached the client; end honestly, never retry.
                exc = _as_provider_error(raw, self.hop.name)
                self.ended = "truncated"
                # Kept without its traceback, whose frames (this one too) hold `self`.
                self.error = exc.with_traceback(None)
                yield Finish("length")
                return
        if not finished:
            yield Finish("stop")
        self.ended = "served"

    def whole(self) -> list[Event] | None:
        """Every event, if the answer is already whole (a replay, a stream that ended early).

        The synchronous twin of `events()`, for a handler that can skip async iteration;
        None while the stream is still open. Use one or the other, once.
        """
        if self.rest is not None:
            return None
        events = self.head
        if not any(isinstance(event, Finish) for event in events):
            events = [*events, Finish("stop")]
        self.ended = "served"
        return events

    async def aclose(self) -> None:
        if not self._closed and self.rest is not None:
            self._closed = True
            aclose = getattr(self.rest, "aclose", None)
            if aclose is not None:
                await aclose()


class FallbackEngine:
    def __init__(
        self,
        cooldowns: Cooldowns,
        *,
        default_retry_after_s: float = 30,
        max_cooldown_s: float = 6 * 3600,
        gates: Sequence[HopGate] = (),
        listeners: Sequence[AttemptListener] = (),
        arrange: Callable[[Chain], Chain] | None = None,
    ) -> None:
        """`arrange`: puts a chain's hops in this request's order (pools, `PoolScheduler`)."""
        self.cooldowns = cooldowns
        self.arrange = arrange
        self.default_retry_after_s = default_retry_after_s
        self.max_cooldown_s = max_cooldown_s
        self.gates: list[HopGate] = list(gates)  # after the cooldown gate
        self.listeners = list(listeners)

    def with_settings(
        self, *, default_retry_after_s: float, max_cooldown_s: float
    ) -> FallbackEngine:
        """An engine with new retry settings that shares this one's cooldowns, gates,
        listeners (a listener added to either is heard by both) and hop order (`arrange`):
        a config reload's."""
        engine = FallbackEngine(
            self.cooldowns,
            default_retry_after_s=default_retry_after_s,
            max_cooldown_s=max_cooldown_s,
            arrange=self.arrange,
        )
        engine.gates, engine.listeners = self.gates, self.listeners
        return engine

    async def open(
        self,
        chain: Chain,
        request: ChatRequest,
        request_id: str,
        cache: CacheScope | None = None,
        gate: HopGate | None = None,
    ) -> Served:
        """Commit to the first hop that produces content; raise ChainFailed if none does.

        `gate`: this request's own gate, after the engine's (a key's spent share)."""
        failures: list[HopFailure] = []
        if self.arrange is not None:
            chain = self.arrange(chain)
        for hop in chain.hops:
            refused = _refusal(hop, request)
            if refused is not None:
                self._record(request_id, chain, hop, refused, "skip", 0.0, failures)
                continue
            source = await find_cached(hop, cache)
            if source is None:
                skip = self._gate(hop) or (gate(hop) if gate is not None else None)
                if skip is not None:
                    self._record(request_id, chain, hop, skip, "skip", 0.0, failures)
                    continue
                source = start(hop, request, request_id, cache)
            if source.stored is not None:  # a replay: complete, nothing to wait for
                return self._replayed(chain, hop, tuple(failures), request_id, source)
            started = time.perf_counter()
            stream = source.events
            try:
                head, ended = await _until_content(stream)
            except Exception as raw:
                await _close(stream)
                exc = _as_provider_error(raw, hop.name)
                trigger = "fallback" if decide(exc.failure).fallback else "stop"
                self._record(request_id, chain, hop, exc, trigger, started, failures, source)
                if trigger == "stop":
                    raise self._stopped(failures, exc) from exc
                continue
            except BaseException:
                await _close(stream)
                self._emit(self._attempt(request_id, chain, hop, "cancelled", started, source))
                raise
            rest = None if ended else stream
            return Served(chain, hop, tuple(failures), head, rest, request_id, started, source)
        raise self._exhausted(failures)

    def _replayed(
        self,
        chain: Chain,
        hop: Hop,
        failures: tuple[HopFailure, ...],
        request_id: str,
        source: HopSource,
    ) -> Served:
        head = list(source.stored or ())
        started = time.perf_counter()
        return Served(chain, hop, failures, head, None, request_id, started, source)

    # -- gates -------------------------------------------------------------------------

    def _gate(self, hop: Hop) -> ProviderError | None:
        cooling = self._cooldown_gate(hop)
        if cooling is not None:
            return cooling
        for gate in self.gates:
            error = gate(hop)
            if error is not None:
                return error
        return None

    def _cooldown_gate(self, hop: Hop) -> ProviderError | None:
        cooling = self.cooldowns.blocking(hop.name, hop.model)
        if cooling is None:
            return None
        what = hop.name if cooling.model is None else f"{hop.name}/{cooling.model}"
        left = max(cooling.until - self.cooldowns.now(), 0.0)
        return ProviderError(
            Failure.COOLDOWN,
            f"{what} is cooling down for {left:.0f}s more after {cooling.reason}"
            + (f": {cooling.message}" if cooling.message else ""),
            provider=hop.name,
            reset_at=cooling.until,
        )

    # -- outcomes ----------------------------------------------------------------------

    def _record(
        self,
        request_id: str,
        chain: Chain,
        hop: Hop,
        exc: ProviderError,
        trigger: str,
        started: float,
        failures: list[HopFailure],
        source: HopSource | None = None,
    ) -> None:
        self._cool_down(hop, exc)
        failures.append(HopFailure(hop.index, hop.name, hop.model, exc, trigger))
        outcome: Outcome = "skipped" if trigger == "skip" else "failed"
        latency = (time.perf_counter() - started) * 1000 if started else 0.0
        upstream = source is not None and source.upstream
        self._emit(
            Attempt(
                request_id,
                chain.name,
                hop.index,
                hop.name,
                hop.model,
                outcome,
                exc.failure,
                exc.message,
                trigger,
                latency,
                upstream,
            )
        )

    def report(self, served: Served) -> None:
        """Tell every listener how the committed hop ended (once, after the answer was sent
        or cut off); a failure after commit also cools its provider down. Nothing if its
        events were never read."""
        if served.ended is None:
            return
        attempt = self._served_attempt(served, served.ended)
        error = served.error
        if error is not None:
            self._cool_down(served.hop, error)
            attempt.failure, attempt.message = error.failure, error.message
        self._emit(attempt)

    def _attempt(
        self,
        request_id: str,
        chain: Chain,
        hop: Hop,
        outcome: Outcome,
        started: float,
        source: HopSource,
    ) -> Attempt:
        latency = (time.perf_counter() - started) * 1000
        return Attempt(
            request_id,
            chain.name,
            hop.index,
            hop.name,
            hop.model,
            outcome,
            latency_ms=latency,
            upstream=source.upstream,
        )

    def _served_attempt(self, served: Served, outcome: Outcome) -> Attempt:
        hop = served.hop
        latency = (time.perf_counter() - served.started) * 1000
        return Attempt(
            served.request_id,
            served.chain.name,
            hop.index,
            hop.name,
            hop.model,
            outcome,
            latency_ms=latency,
            upstream=served.source.upstream,
            replay=served.source.role == "stored",
        )

    def _emit(self, attempt: Attempt) -> None:
        if log.enabled(logging.INFO):  # the fields cost something to build; skip if unused
            self._log_hop(attempt)
        for listener in self.listeners:
            listener(attempt)

    def _log_hop(self, attempt: Attempt) -> None:
        log.info(
            "hop",
            request_id=attempt.request_id,
            chain=attempt.chain,
            hop=attempt.hop,
            provider=attempt.provider,
            model=attempt.model,
            outcome=attempt.outcome,
            code=attempt.failure,
            trigger=attempt.trigger or None,
            latency_ms=round(attempt.latency_ms, 2),
            message=attempt.message[:200] or None,
        )

    def _cool_down(self, hop: Hop, exc: ProviderError) -> None:
        scope = decide(exc.failure).cooldown
        if scope == "none":
            return
        now = self.cooldowns.now()
        if exc.reset_at is not None and exc.reset_at > now:
            seconds = exc.reset_at - now
        elif exc.retry_after is not None:
            seconds = exc.retry_after
        else:
            seconds = self.default_retry_after_s
        seconds = min(seconds, self.max_cooldown_s)
        model = hop.model if scope == "model" else None
        self.cooldowns.cool(hop.name, model, seconds, exc.failure.value, exc.message[:200])

    def _stopped(self, failures: list[HopFailure], exc: ProviderError) -> ChainFailed:
        return ChainFailed(
            tuple(failures), exc, http_status=exc.http_status, code=exc.code, retry_after=None
        )

    def _exhausted(self, failures: list[HopFailure]) -> ChainFailed:
        codes = {f.error.failure for f in failures}
        if codes == {Failure.UNSUPPORTED}:
            return _unsupported(failures)
        status = 429 if codes <= RATE_OR_QUOTA else 503
        code = "no_provider_available" if codes <= SKIPS else "all_providers_failed"
        if codes <= SKIPS and Failure.SHARE_SPENT in codes:
            code = "key_limit_exceeded"  # the key's own share, not the providers, ran out
        return ChainFailed(
            tuple(failures),
            failures[0].error,
            http_status=status,
            code=code,
            retry_after=self._retry_after(failures),
        )

    def _retry_after(self, failures: list[HopFailure]) -> float:
        """Seconds until the earliest hop is expected back (docs/design.md §5 rule 5)."""
        now = self.cooldowns.now()
        hints: list[float] = []
        for failure in failures:
            err = failure.error
            if err.reset_at is not None:
                hints.append(err.reset_at - now)
            elif err.retry_after is not None:
                hints.append(err.retry_after)
        if not hints:
            return float(self.default_retry_after_s)
        return max(1.0, min(min(hints), self.max_cooldown_s))


def _refusal(hop: Hop, request: ChatRequest) -> ProviderError | None:
    """A hop whose provider cannot honour the request is skipped, never answered without."""
    field = hop.provider.capabilities.refusal(request)
    if field is None:
        return None
    return ProviderError(
        Failure.UNSUPPORTED,
        f"{hop.name} cannot honour `{field}`",
        provider=hop.name,
        param=field,
    )


def _unsupported(failures: list[HopFailure]) -> ChainFailed:
    """No hop can honour the request: the client's to change, so a 400 naming the field."""
    fields = sorted({f.error.param or "" for f in failures})
    names = ", ".join(f.provider for f in failures)
    shown = ProviderError(
        Failure.UNSUPPORTED,
        f"no provider of this model can honour {', '.join(f'`{f}`' for f in fields)} "
        f"(tried: {names}); see `olp doctor` for what each provider supports",
        param=fields[0],
    )
    failed = ChainFailed(
        tuple(failures), shown, http_status=400, code="unsupported_request", retry_after=None
    )
    failed.type = "invalid_request_error"
    return failed


async def _until_content(stream: AsyncIterator[Event]) -> tuple[list[Event], bool]:
    """Pull events up to the first content event; also say whether the stream ended."""
    head: list[Event] = []
    async for event in stream:
        head.append(event)
        if is_content(event):
            return head, False
    return head, True


def _as_provider_error(exc: Exception, provider: str) -> ProviderError:
    """A provider's own bug must not take the request down: treat it as a failed hop."""
    if isinstance(exc, ProviderError):
        exc.provider = exc.provider or provider
        return exc
    log.error("provider_bug", provider=provider, error=repr(exc), exc_info=True)
    return ProviderError(
        Failure.UPSTREAM_ERROR,
        f"provider {provider!r} failed unexpectedly ({type(exc).__name__}); see the OLP log",
        provider=provider,
    )


async def _close(stream: AsyncIterator[Event]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
