"""Streaming singleflight: identical in-flight requests share one upstream stream.

    flights = SingleFlight(max_buffer_bytes=config.max_entry_bytes)
    leader, events = flights.open(namespace, key, start)   # start() -> AsyncIterator[Event]
    try:
        async for event in events: ...
    finally:
        await events.aclose()

The first caller for a (namespace, key) is the leader: `start()` is called once, inside a
task of its own (the *pump*), so the upstream is tied to no caller. Later callers become
followers. Every caller gets its own view: all events produced so far (replay), then the
live tail, as fast as the upstream produces it.

Rules, each one a trap other gateways fell into:
- A listener is a view not yet closed. When a listener leaves, the others are unaffected;
  when the *last* one leaves before the end, the pump is cancelled and the upstream
  iterator closed (its `finally` runs: an HTTP connection closes, a CLI is killed).
  Callers must close their view (`aclose()`, or iterate it to the end).
- If the upstream raises, every listener gets that same exception after the events that
  came before it. Errors are never kept: a finished flight leaves the table at once, so a
  later request starts afresh.
- Memory: the buffer is the answer itself, shared by all views (a view is just a cursor),
  so a listener that stops reading never makes it grow beyond the answer. The pump does not
  wait for slow listeners (the leader's pace is the upstream's). Once the answer outgrows
  `max_buffer_bytes` (it could not be cached anyway), the flight leaves the table — later
  arrivals start their own — and the prefix every listener has read is dropped.
- `on_success(events)` is called when the upstream ended without an error, with the whole
  answer, unless it overflowed the buffer limit (sizes estimated by `codec.estimate_size`).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from types import TracebackType

from olp.cache.codec import estimate_size
from olp.errors import Failure, ProviderError
from olp.ir import Event, TextDelta
from olp.observability import event_logger

__all__ = ["Flight", "FlightView", "OnSuccess", "SingleFlight", "Start"]

log = event_logger("olp.cache")

Start = Callable[[], AsyncIterator[Event]]
OnSuccess = Callable[[tuple[Event, ...]], None]
# Drop the read prefix of an overflowed answer only in chunks this big (amortised O(1)).
_TRIM_MIN = 256
_CHECK_EVERY = 64
_CANCELLED = "the shared upstream stream was cancelled"


class FlightView:
    """One listener's iterator over a flight: replay, then the live tail."""

    __slots__ = ("__weakref__", "_closed", "_flight", "_pos")

    def __init__(self, flight: Flight, pos: int) -> None:
        self._flight = flight
        self._pos = pos
        self._closed = False

    def __aiter__(self) -> FlightView:
        return self

    async def __anext__(self) -> Event:
        flight = self._flight
        while not self._closed:
            i = self._pos - flight.base
            if i < len(flight.events):
                self._pos += 1
                event = flight.events[i]
                if flight.overflowed and i >= _TRIM_MIN and not i % _TRIM_MIN:
                    flight.trim()
                return event
            if flight.done:
                self._closed = True
                flight.leave(self)
                flight.raise_error()
                break
            await flight.wait()
        raise StopAsyncIteration

    @property
    def position(self) -> int:
        return self._pos

    async def aclose(self) -> None:
        """Stop listening; the last listener to leave early cancels the upstream."""
        if not self._closed:
            self._closed = True
            await self._flight.leave_early(self)


class Flight:
    """One upstream answer in progress and everything it produced so far."""

    def __init__(
        self,
        owner: SingleFlight,
        namespace: str,
        key: str,
        max_bytes: int,
        on_success: OnSuccess | None,
    ) -> None:
        self.owner = owner
        self.namespace = namespace
        self.key = key
        self.events: list[Event] = []
        self.base = 0  # position of events[0] in the answer, once a prefix was dropped
        # One future per waiting view (never shared: cancelling one waiter must not wake or
        # cancel the others). Woken, and replaced, by each new event.
        self._waiters: list[asyncio.Future[None]] = []
        self.done = False
        # Past the size limit: nobody may join, and what every listener read is dropped.
        self.overflowed = False
        self._nbytes = 0  # estimated encoded size (`codec.estimate_size`)
        self._max_bytes = max_bytes
        self._on_success = on_success
        self._error: BaseException | None = None
        self._error_tb: TracebackType | None = None
        self._views: weakref.WeakSet[FlightView] = weakref.WeakSet()
        self._task: asyncio.Task[None] | None = None

    def view(self) -> FlightView:
        view = FlightView(self, self.base)
        self._views.add(view)
        return view

    def start(self, start: Start) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._pump(start), name=f"olp-singleflight-{self.key[:12]}"
        )

    @property
    def listeners(self) -> int:
        return len(self._views)

    def raise_error(self) -> None:
        if self._error is not None:
            # The same exception for every listener, each time with the upstream's traceback.
            raise self._error.with_traceback(self._error_tb)

    # -- listeners leaving ---------------------------------------------------------------

    def leave(self, view: FlightView) -> None:
        self._views.discard(view)

    async def leave_early(self, view: FlightView) -> None:
        self._views.discard(view)
        if self._views or self.done:
            return
        self.owner.unshare(self)  # a new request must not join a dying flight
        await self.cancel()

    async def cancel(self) -> None:
        """Cancel the pump and wait until the upstream's cleanup has run.

        If the caller is cancelled while waiting, the pump still finishes cancelling.
        """
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})
        if not self.done:  # cancelled before the pump ever ran
            self._fail(ProviderError(Failure.UPSTREAM_ERROR, _CANCELLED))
            self._finish(False)

    # -- the pump ------------------------------------------------------------------------

    async def _pump(self, start: Start) -> None:
        upstream: AsyncIterator[Event] | None = None
        ok = False
        try:
            upstream = start()
            async for event in upstream:
                self._append(event)
                # Every view dropped without aclose()? Checked now and then: it is rare.
                if not len(self.events) % _CHECK_EVERY and not self._views:
                    break
            else:
                ok = True
        except asyncio.CancelledError:
            self._fail(ProviderError(Failure.UPSTREAM_ERROR, _CANCELLED))
            raise
        except Exception as exc:
            self._fail(exc)
        finally:
            if upstream is not None:
                await _close(upstream)
            self._finish(ok)

    def _append(self, event: Event) -> None:
        self.events.append(event)
        if not self.overflowed:
            # Text deltas are nearly every event: size them inline (`codec.estimate_size`).
            size = len(event.text) + 8 if type(event) is TextDelta else estimate_size(event)
            self._nbytes += size
            if self._nbytes > self._max_bytes:
                self._overflow()
        if self._waiters:
            self._wake()

    def _overflow(self) -> None:
        self.overflowed = True
        self.owner.unshare(self)
        log.info(
            "singleflight_overflow",
            namespace=self.namespace,
            key=self.key,
            max_bytes=self._max_bytes,
        )

    async def wait(self) -> None:
        """Until the next event, or the end."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():  # a cancelled waiter is simply skipped
                waiter.set_result(None)

    def trim(self) -> None:
        low = min((v.position for v in self._views), default=self.base + len(self.events))
        read = low - self.base
        if read >= _TRIM_MIN and read >= len(self.events) // 2:
            del self.events[:read]
            self.base = low

    def _fail(self, exc: BaseException) -> None:
        self._error, self._error_tb = exc, exc.__traceback__

    def _finish(self, ok: bool) -> None:
        if self.done:
            return
        if ok and not self.overflowed and self._on_success is not None:
            try:
                self._on_success(tuple(self.events))
            except Exception as exc:  # a caching bug must not break the answer
                log.error("singleflight_store_failed", error=repr(exc), exc_info=True)
        self.owner.finished(self)
        self.done = True
        self._wake()


class SingleFlight:
    """The table of flights in progress, by (namespace, key)."""

    def __init__(self, *, max_buffer_bytes: int) -> None:
        self._max_bytes = max_buffer_bytes
        self._table: dict[tuple[str, str], Flight] = {}
        # Every flight not finished yet, shared or not, for stats and shutdown.
        self._running: dict[str, set[Flight]] = {}

    def join(self, namespace: str, key: str) -> FlightView | None:
        """A follower's view of the flight in progress for (namespace, key), if any."""
        flight = self._table.get((namespace, key))
        return None if flight is None else flight.view()

    def lead(
        self,
        namespace: str,
        key: str,
        start: Start,
        *,
        on_success: OnSuccess | None = None,
        share: bool = True,
    ) -> FlightView:
        """Start a new flight and return the leader's view.

        With `share`, later `join`s find it — unless another flight for the same key is in
        progress (a `no-cache` request runs its own upstream call beside it).
        """
        flight = Flight(self, namespace, key, self._max_bytes, on_success)
        view = flight.view()
        if share and (namespace, key) not in self._table:
            self._table[(namespace, key)] = flight
        self._running.setdefault(namespace, set()).add(flight)
        flight.start(start)
        return view

    def open(
        self, namespace: str, key: str, start: Start, *, on_success: OnSuccess | None = None
    ) -> tuple[bool, FlightView]:
        """Join the flight in progress, or lead a new one: (is_leader, view)."""
        view = self.join(namespace, key)
        if view is not None:
            return False, view
        return True, self.lead(namespace, key, start, on_success=on_success)

    def unshare(self, flight: Flight) -> None:
        """Later requests must not join `flight` (it overflowed, or nobody listens)."""
        if self._table.get((flight.namespace, flight.key)) is flight:
            del self._table[(flight.namespace, flight.key)]

    def finished(self, flight: Flight) -> None:
        """Forget `flight` entirely; idempotent."""
        self.unshare(flight)
        running = self._running.get(flight.namespace)
        if running is not None:
            running.discard(flight)
            if not running:
                del self._running[flight.namespace]

    def in_flight(self, namespace: str | None = None) -> int:
        if namespace is not None:
            return len(self._running.get(namespace, ()))
        return sum(len(flights) for flights in self._running.values())

    def in_flight_by_namespace(self) -> dict[str, int]:
        return {ns: len(flights) for ns, flights in self._running.items()}

    async def aclose(self) -> None:
        """Cancel every flight still running (shutdown); their listeners get an error."""
        flights = [f for running in self._running.values() for f in running]
        for flight in flights:
            await flight.cancel()


async def _close(upstream: AsyncIterator[Event]) -> None:
    aclose = getattr(upstream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
