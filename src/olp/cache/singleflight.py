"""Streaming singleflight: identical in-flight requests share one upstream stream.

    flights = SingleFlight(max_buffer_bytes=config.max_entry_bytes)
    leader, events = flights.open(namespace, key, start)   # start() -> AsyncIterator[Event]
    try:
        async for event in events: ...
    finally:
        await events.aclose()

The first caller for a (namespace, key) leads a new *flight*: a task of its own (the
pump) calls `start()` once and reads the upstream, so the upstream is tied to no caller
and a leader that goes away never cuts a follower. Later callers attach to the flight.
Every caller gets its own view: all events produced so far (replay), then the live tail,
as fast as the upstream produces it.

Rules, each one a trap other gateways fell into:
- A listener is a view not yet closed. When a listener leaves, the others are unaffected;
  when the *last* one leaves before the end, the upstream is cancelled and closed (its
  `finally` runs: an HTTP connection closes, a CLI is killed). Callers must close their
  view (`aclose()`, or iterate it to the end); a view dropped unclosed counts as closed.
- If the upstream raises, every listener gets that same exception after the events that
  came before it. Errors are never kept: a finished flight leaves the table at once, so a
  later request starts afresh.
- Memory: the buffer is the answer itself, shared by all views (a view is just a cursor),
  so a listener that stops reading never makes it grow beyond the answer. The pump does not
  wait for slow listeners. Once the answer outgrows `max_buffer_bytes` (it could not be
  cached anyway), the flight leaves the table — later arrivals start their own — and the
  prefix every listener has read is dropped.
- `on_success(events)` is called when the upstream ended without an error, with the whole
  answer, unless it overflowed the buffer limit (sizes estimated by `codec.estimate_size`).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable
from types import TracebackType

from olp.cache.codec import estimate_size
from olp.errors import Failure, ProviderError
from olp.ir import Event
from olp.observability import event_logger

__all__ = ["Flight", "FlightView", "OnSuccess", "SingleFlight", "Start"]

log = event_logger("olp.cache")

Start = Callable[[], AsyncIterator[Event]]
OnSuccess = Callable[[tuple[Event, ...]], None]
# Drop the read prefix of an overflowed answer only in chunks this big (amortised O(1)).
_TRIM_MIN = 256
_CANCELLED = "the shared upstream stream was cancelled"


class SingleFlight:
    """The table of flights in progress, by (namespace, key)."""

    def __init__(self, *, max_buffer_bytes: int) -> None:
        # (A config reload may change it: flights started from then on use the new one.)
        self.max_buffer_bytes = max_buffer_bytes
        self._table: dict[tuple[str, str], Flight] = {}
        # Every flight not finished yet, shared or not, for stats and shutdown.
        self._running: dict[Flight, None] = {}

    def join(self, namespace: str, key: str) -> FlightView | None:
        """A follower's view of the flight in progress for (namespace, key), if any."""
        flight = self._table.get((namespace, key))
        return None if flight is None else flight.view()

    def lead(
        self,
        namespace: str,
        key: str,
        start: Start,
        on_success: OnSuccess | None = None,
        *,
        share: bool = True,
    ) -> FlightView:
        """Start a new flight and return the leader's view.

        With `share`, later `join`s find it — unless another flight for the same key is in
        progress (a `no-cache` request runs its own upstream call beside it).
        """
        at = (namespace, key)
        flight = Flight(self, at, start, self.max_buffer_bytes, on_success)
        view = flight.view()
        if share and at not in self._table:
            self._table[at] = flight
        self._running[flight] = None
        return view

    def open(
        self, namespace: str, key: str, start: Start, *, on_success: OnSuccess | None = None
    ) -> tuple[bool, FlightView]:
        """Join the flight in progress, or lead a new one: (is_leader, view)."""
        view = self.join(namespace, key)
        if view is not None:
            return False, view
        return True, self.lead(namespace, key, start, on_success)

    def unshare(self, flight: Flight) -> None:
        """Later requests must not join `flight` (it overflowed, or nobody listens)."""
        if self._table.get(flight.at) is flight:
            del self._table[flight.at]

    def finished(self, flight: Flight) -> None:
        """Forget `flight` entirely; idempotent."""
        self.unshare(flight)
        self._running.pop(flight, None)

    def in_flight(self, namespace: str | None = None) -> int:
        if namespace is None:
            return len(self._running)
        return sum(1 for flight in self._running if flight.at[0] == namespace)

    def in_flight_by_namespace(self) -> dict[str, int]:
        return dict(Counter(flight.at[0] for flight in self._running))

    async def aclose(self) -> None:
        """Cancel every flight still running (shutdown); their listeners get an error."""
        for flight in list(self._running):
            await flight.cancel()


class FlightView:
    """One listener's iterator over a flight: replay, then the live tail."""

    __slots__ = ("__weakref__", "_closed", "_flight", "_pos", "ref")

    def __init__(self, flight: Flight, pos: int) -> None:
        self._flight = flight
        self._pos = pos
        self._closed = False
        # How the flight holds it: weakly, so a view dropped unclosed dies (see __del__).
        self.ref = weakref.ref(self)

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

    def __del__(self) -> None:
        if not self._closed:  # dropped without aclose(): a caller's bug, but never a leak
            self._flight.dropped(self.ref)


class Flight:
    """One upstream answer in progress, read by its pump, and everything it produced so far."""

    __slots__ = (
        "_error",
        "_error_tb",
        "_on_success",
        "_pump",
        "_start",
        "_upstream",
        "_waiters",
        "at",
        "base",
        "done",
        "events",
        "max_bytes",
        "nbytes",
        "overflowed",
        "owner",
        "views",
    )

    def __init__(
        self,
        owner: SingleFlight,
        at: tuple[str, str],
        start: Start,
        max_bytes: int,
        on_success: OnSuccess | None,
    ) -> None:
        self.owner = owner
        self.at = at  # (namespace, key)
        self.events: list[Event] = []
        self.base = 0  # position of events[0] in the answer, once a prefix was dropped
        # One future per waiting view (never shared: cancelling one waiter must not wake or
        # cancel the others). Woken, and replaced, by each new event.
        self._waiters: list[asyncio.Future[None]] = []
        self.done = False
        # Past the size limit: nobody may join, and what every listener read is dropped.
        self.overflowed = False
        self.nbytes = 0  # estimated encoded size (`codec.estimate_size`)
        self.max_bytes = max_bytes
        self._on_success = on_success
        self._error: BaseException | None = None
        self._error_tb: TracebackType | None = None
        self.views: set[weakref.ref[FlightView]] = set()  # the views not closed yet
        self._start = start
        self._upstream: AsyncIterator[Event] | None = None
        self._pump = asyncio.get_running_loop().create_task(
            self._run_pump(), name=f"olp-singleflight-{at[1][:12]}"
        )
        # A pump cancelled before it ran never enters `_run_pump`: end the flight anyway.
        self._pump.add_done_callback(self._pump_done)

    def view(self) -> FlightView:
        """A new listener's view, from the start of the answer."""
        view = FlightView(self, self.base)
        self.views.add(view.ref)
        return view

    def raise_error(self) -> None:
        error, tb = self._error, self._error_tb
        if error is None:
            return
        if not self.views:
            # The last listener: the flight lets go of the error, whose traceback holds
            # the frames that hold the flight (a cycle, left for the garbage collector).
            self._error = self._error_tb = None
        try:
            # The same exception for every listener, each time with the upstream's traceback.
            raise error.with_traceback(tb)
        finally:
            error = tb = None  # this frame joins the traceback: it must not hold them

    # -- listeners leaving ---------------------------------------------------------------

    def leave(self, view: FlightView) -> None:
        self.views.discard(view.ref)

    async def leave_early(self, view: FlightView) -> None:
        self.views.discard(view.ref)
        if self.views or self.done:
            return
        self.owner.unshare(self)  # a new request must not join a dying flight
        await self.cancel()

    def dropped(self, ref: weakref.ref[FlightView]) -> None:
        """A view was garbage-collected unclosed: if it was the last, end the upstream."""
        self.views.discard(ref)
        if self.views or self.done:
            return
        self.owner.unshare(self)
        self._pump.cancel()

    async def cancel(self) -> None:
        """Cancel the upstream and wait until its cleanup has run.

        If the caller is cancelled while waiting, the pump still finishes cancelling.
        """
        pump = self._pump
        if not pump.done():
            pump.cancel()
            await asyncio.wait({pump})

    # -- the pump ------------------------------------------------------------------------

    async def _run_pump(self) -> None:
        ok = False
        try:
            self._upstream = self._start()
            async for event in self._upstream:
                self.append(event)
            ok = True
        except asyncio.CancelledError:
            self._fail(ProviderError(Failure.UPSTREAM_ERROR, _CANCELLED))
            raise
        except Exception as exc:
            self._fail(exc)
        finally:
            # An upstream that ended by itself has run its cleanup; one that failed or was
            # cut off mid-way may hold a connection or a child process until closed.
            if not ok and self._upstream is not None:
                await _close(self._upstream)
            self.finish(ok)

    def _pump_done(self, _: asyncio.Task[None]) -> None:
        if not self.done:
            self._fail(ProviderError(Failure.UPSTREAM_ERROR, _CANCELLED))
            self.finish(False)

    def append(self, event: Event) -> None:
        self.events.append(event)
        if not self.overflowed:
            self.nbytes += estimate_size(event)
            if self.nbytes > self.max_bytes:
                self.overflow()
        if self._waiters:
            self._wake()

    def overflow(self) -> None:
        self.overflowed = True
        self.owner.unshare(self)
        namespace, key = self.at
        log.info("singleflight_overflow", namespace=namespace, key=key, max_bytes=self.max_bytes)

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
        positions = [v.position for r in self.views if (v := r()) is not None]
        low = min(positions, default=self.base + len(self.events))
        read = low - self.base
        if read >= _TRIM_MIN and read >= len(self.events) // 2:
            del self.events[:read]
            self.base = low

    def _fail(self, exc: BaseException) -> None:
        self._error, self._error_tb = exc, exc.__traceback__

    def finish(self, ok: bool) -> None:
        if self.done:
            return
        if ok and not self.overflowed and self._on_success is not None:
            try:
                self._on_success(tuple(self.events))
            except Exception as exc:  # a caching bug must not break the answer
                log.error("singleflight_store_failed", error=repr(exc), exc_info=True)
        self.owner.finished(self)
        self.done = True
        if self._waiters:
            self._wake()


async def _close(upstream: AsyncIterator[Event]) -> None:
    aclose = getattr(upstream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
