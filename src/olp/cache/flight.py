"""A flight: one upstream answer in progress, the views reading it, and who reads the upstream.

`olp.cache.singleflight` explains the rules; `SingleFlight` there is the table of flights.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import TYPE_CHECKING

from olp.cache.codec import FIXED_SIZES, estimate_size
from olp.cache.guard import CancelGuard
from olp.errors import Failure, ProviderError
from olp.ir import Event, TextDelta
from olp.observability import event_logger

if TYPE_CHECKING:
    from olp.cache.singleflight import SingleFlight

__all__ = ["Flight", "FlightView", "LeaderView", "OnSuccess", "Start"]

log = event_logger("olp.cache")

Start = Callable[[], AsyncIterator[Event]]
OnSuccess = Callable[[tuple[Event, ...]], None]
# Drop the read prefix of an overflowed answer only in chunks this big (amortised O(1)).
_TRIM_MIN = 256
_CANCELLED = "the shared upstream stream was cancelled"


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


class LeaderView(FlightView):
    """The leader's view: while the leader is alone (inline), iterating it reads the upstream.

    The read is written out here rather than in a helper coroutine: every event, and every
    wait of the upstream's, would pass through one more frame.
    """

    __slots__ = ()

    async def __anext__(self) -> Event:
        flight = self._flight
        if flight.guard is None:  # not inline: a pump reads the upstream, or it is over
            return await FlightView.__anext__(self)
        flight.pulling = True
        try:
            event: Event = await flight.pull()
        except StopAsyncIteration:
            flight.pulling = False
            flight.finish(True)
            self._closed = True
            flight.views.discard(self.ref)  # (`leave`, written out)
            raise
        except BaseException as exc:  # an error, or a cancellation (re-raised)
            flight.pulling = False
            await flight.end_pull(exc)
            return await FlightView.__anext__(self)  # as every view ends
        flight.pulling = False
        self._pos += 1
        if flight.handover:
            flight.start_pump()
        elif flight.overflowed:
            # Alone, and nobody may join any more: there is nobody to keep the answer for.
            flight.events.clear()
            flight.base = self._pos
            return event
        flight.append(event)  # (after a handover, a follower may be waiting for it)
        return event


class Flight:
    """One upstream answer in progress and everything it produced so far."""

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
        "guard",
        "handover",
        "max_bytes",
        "nbytes",
        "overflowed",
        "owner",
        "pull",
        "pulling",
        "views",
    )

    # (Positional only, and no more fields than it needs: one is built on every miss.)
    def __init__(
        self,
        owner: SingleFlight,
        at: tuple[str, str],
        start: Start,
        max_bytes: int,
        on_success: OnSuccess | None,
        guard: CancelGuard | None,
        /,
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
        self._pump: asyncio.Task[None] | None = None
        # Held while the leader pulls inline, in its own task (until a follower joins or
        # the answer is complete): its disconnect watch, whose task is the leader's.
        self.guard = guard
        self.pulling = False
        self.handover = False  # a follower joined during an inline pull
        if guard is None:
            self._upstream: AsyncIterator[Event] | None = None
        else:
            # (As with the cache off, `start` runs now: it only builds the provider's
            # stream, and if it raises, nothing is held yet.)
            upstream = self._upstream = start()
            self.pull = upstream.__anext__  # the leader's read, one call per event
            guard.hold(self._may_cancel)

    @property
    def inline(self) -> bool:
        """The leader pulls the upstream in its own task (no pump): the guard is held."""
        return self.guard is not None

    def view(self) -> FlightView:
        """A follower's view (the leader's is made with the flight: `SingleFlight.lead`)."""
        view = FlightView(self, self.base)
        if self.guard is not None:  # inline: the upstream must outlive the leader now
            if self.pulling:
                self.handover = True  # once the pull in progress is over
            else:
                self.start_pump()
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
        if self._pump is not None:
            self._pump.cancel()
            return
        self._end_cancelled()
        if self._upstream is not None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nothing to close
                asyncio.get_running_loop().create_task(_close(self._upstream))

    async def cancel(self) -> None:
        """Cancel the upstream and wait until its cleanup has run.

        If the caller is cancelled while waiting, the pump still finishes cancelling. An
        inline pull in progress (shutdown) is cancelled in its task, not waited for.
        """
        task = self._pump
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})
        elif self.pulling and self.guard is not None and self.guard.task is not None:
            self.guard.task.cancel()  # the leader's pull ends the flight
            return
        if not self.done:  # no pump ran the upstream to its end: inline, or never started
            upstream = self._upstream
            self._end_cancelled()
            if upstream is not None:
                await _close(upstream)

    def _end_cancelled(self) -> None:
        if not self.done:
            self._fail(ProviderError(Failure.UPSTREAM_ERROR, _CANCELLED))
            self.finish(False)

    # -- pulling the upstream: the lone leader inline, else the pump ---------------------

    async def end_pull(self, exc: BaseException) -> None:
        """An inline read failed, or was cancelled with the leader's task."""
        if isinstance(exc, Exception):
            self._fail(exc)
            await self._settle(False)
            return
        self._fail(ProviderError(Failure.UPSTREAM_ERROR, _CANCELLED))
        if isinstance(exc, GeneratorExit):  # the leader's coroutine is being closed: no await
            self.finish(False)
            raise exc
        await self._settle(False)
        raise exc

    def _release_guard(self) -> None:
        # Once a pump reads the upstream, or the flight is over, a disconnect of the
        # leader's client is its own business again (a cancel deferred meanwhile lands now).
        guard, self.guard = self.guard, None
        if guard is not None:
            guard.release()

    def _may_cancel(self) -> bool:
        """The leader's client left mid-pull: cut the upstream only if nobody else listens."""
        if len(self.views) > 1:
            return False
        self.owner.unshare(self)
        return True

    async def _settle(self, ok: bool) -> None:
        # An upstream that ended by itself has run its cleanup; one that failed or was cut
        # off mid-way may hold a connection or a child process until closed.
        if not ok and self._upstream is not None:
            await _close(self._upstream)
        self.finish(ok)

    def start_pump(self) -> None:
        """From now on a task of its own pulls the upstream."""
        self._pump = asyncio.get_running_loop().create_task(
            self._run_pump(), name=f"olp-singleflight-{self.at[1][:12]}"
        )
        self._release_guard()

    async def _run_pump(self) -> None:
        ok = False
        try:
            if self._upstream is None:
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
            await self._settle(ok)

    def append(self, event: Event) -> None:
        self.events.append(event)
        if not self.overflowed:
            # Nearly every event is a text delta, a usage or a finish: sized inline, with no
            # call (`codec.estimate_size` sizes the rest).
            if type(event) is TextDelta:
                self.nbytes += len(event.text) + 8
            else:
                self.nbytes += FIXED_SIZES.get(type(event)) or estimate_size(event)
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
        self._release_guard()


async def _close(upstream: AsyncIterator[Event]) -> None:
    aclose = getattr(upstream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
