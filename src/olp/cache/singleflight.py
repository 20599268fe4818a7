"""Streaming singleflight: identical in-flight requests share one upstream stream.

    flights = SingleFlight(max_buffer_bytes=config.max_entry_bytes)
    leader, events = flights.open(namespace, key, start)   # start() -> AsyncIterator[Event]
    try:
        async for event in events: ...
    finally:
        await events.aclose()

The first caller for a (namespace, key) is the leader: `start()` is called once. Later
callers become followers. Every caller gets its own view: all events produced so far
(replay), then the live tail, as fast as the upstream produces it.

Who pulls the upstream:
- A *pump*, a task of its own, so the upstream is tied to no caller and a leader that goes
  away never cuts a follower.
- Or, while the leader is alone, the leader itself, in its own task (*inline*): most
  requests never get a follower, and a task plus a task switch per event is then pure
  cost. This needs the leader's `CancelGuard` (its disconnect watch): a disconnect while
  the leader pulls for a follower too must not cancel the pull. The first follower to
  join hands the upstream to a pump — at once, or after the pull in progress.

Rules, each one a trap other gateways fell into:
- A listener is a view not yet closed. When a listener leaves, the others are unaffected;
  when the *last* one leaves before the end, the upstream is cancelled and closed (its
  `finally` runs: an HTTP connection closes, a CLI is killed). Callers must close their
  view (`aclose()`, or iterate it to the end).
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

from collections import Counter

from olp.cache.flight import Flight, FlightView, LeaderView, OnSuccess, Start
from olp.cache.guard import CancelGuard

__all__ = ["CancelGuard", "Flight", "FlightView", "OnSuccess", "SingleFlight", "Start"]


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
        guard: CancelGuard | None = None,
        *,
        share: bool = True,
    ) -> FlightView:
        """Start a new flight and return the leader's view.

        With `share`, later `join`s find it — unless another flight for the same key is in
        progress (a `no-cache` request runs its own upstream call beside it). With the
        leader's `guard`, the leader pulls the upstream itself until a follower joins;
        without, a pump does from the start.
        """
        at = (namespace, key)
        flight = Flight(self, at, start, self.max_buffer_bytes, on_success, guard)
        # With a guard the leader pulls inline (`LeaderView`); without, a pump does.
        view = FlightView(flight, 0) if guard is None else LeaderView(flight, 0)
        flight.views.add(view.ref)
        table = self._table
        if share and at not in table:
            table[at] = flight
        self._running[flight] = None
        if guard is None:
            flight.start_pump()
        return view

    def open(
        self,
        namespace: str,
        key: str,
        start: Start,
        *,
        on_success: OnSuccess | None = None,
        guard: CancelGuard | None = None,
    ) -> tuple[bool, FlightView]:
        """Join the flight in progress, or lead a new one: (is_leader, view)."""
        view = self.join(namespace, key)
        if view is not None:
            return False, view
        return True, self.lead(namespace, key, start, on_success=on_success, guard=guard)

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
        flights = list(self._running)
        for flight in flights:
            await flight.cancel()
