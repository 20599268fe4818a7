"""The lone leader: it pulls the upstream in its own task until a follower joins.

The guard is the server's real `DisconnectWatch`; a client going away is the
`http.disconnect` its `receive()` then gives.
"""

from __future__ import annotations

import asyncio
import gc

import pytest
from cache_fakes import ANSWER, Upstream, drain, run, settle

from olp.cache.singleflight import FlightView, SingleFlight
from olp.errors import Failure, ProviderError
from olp.ir import Event, TextDelta
from olp.server.asgi import DisconnectWatch, Request


class Client:
    """One request's side: its disconnect watch (the guard) and how to make it go away."""

    def __init__(self) -> None:
        self._gone = asyncio.Event()
        self.watch = DisconnectWatch(Request({"type": "http"}, self._receive))

    async def _receive(self) -> dict[str, object]:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    def disconnect(self) -> None:
        self._gone.set()


def lead(sf: SingleFlight, up: Upstream, **kw: object) -> tuple[Client, FlightView]:
    """Open as the leader in the current task, with its client's watch as the guard."""
    client = Client()
    is_leader, view = sf.open("ns", "k", up.start, guard=client.watch, **kw)  # type: ignore[arg-type]
    assert is_leader
    return client, view


def pumps() -> int:
    return sum(t.get_name().startswith("olp-singleflight") for t in asyncio.all_tasks())


def test_a_lone_leader_pulls_in_its_own_task() -> None:
    async def main() -> None:
        sf = SingleFlight(max_buffer_bytes=1 << 20)
        up = Upstream()
        stored: list[tuple[Event, ...]] = []
        _, view = lead(sf, up, on_success=lambda e: stored.append(e))
        got = [await view.__anext__()]
        assert pumps() == 0 and view._flight.inline
        got += await drain(view)
        assert got == list(ANSWER)
        assert stored == [ANSWER]
        assert up.starts == up.closed == 1
        assert sf.in_flight() == 0

    run(main)


def test_a_lone_leader_over_the_buffer_limit_streams_on_holding_nothing() -> None:
    async def main() -> None:
        sf = SingleFlight(max_buffer_bytes=100)
        events = [TextDelta(f"chunk {i:04d} ") for i in range(1000)]
        up = Upstream(events)
        stored: list[tuple[Event, ...]] = []
        _, view = lead(sf, up, on_success=lambda e: stored.append(e))
        got = [await view.__anext__() for _ in range(500)]
        flight = view._flight
        assert flight.inline and flight.overflowed
        assert flight.events == []  # read by its only listener, and nobody may join
        # Past the limit the flight is no longer joinable: a new request leads its own.
        is_leader, other = sf.open("ns", "k", Upstream().start)
        assert is_leader
        assert await drain(other) == list(ANSWER)
        got += await drain(view)
        assert got == events
        assert stored == []
        assert up.starts == up.closed == 1

    run(main)


def test_a_follower_joining_between_pulls_hands_the_upstream_to_a_pump() -> None:
    async def main() -> None:
        sf = SingleFlight(max_buffer_bytes=1 << 20)
        up = Upstream(pause_at=3)
        _, leader = lead(sf, up)
        assert [await leader.__anext__() for _ in range(2)] == list(ANSWER[:2])
        _, follower = sf.open("ns", "k", up.start)
        assert pumps() == 1
        up.release()
        assert await drain(follower) == list(ANSWER)
        assert await drain(leader) == list(ANSWER[2:])
        assert up.starts == 1

    run(main)


def test_a_follower_joining_during_a_pull_gets_the_whole_answer() -> None:
    async def main() -> None:
        sf = SingleFlight(max_buffer_bytes=1 << 20)
        up = Upstream(pause_at=1)

        async def leader() -> list[Event]:
            return await drain(lead(sf, up)[1])

        task = asyncio.create_task(leader())
        await settle()  # the leader is inside its second pull, waiting for the upstream
        _, follower = sf.open("ns", "k", up.start)
        assert pumps() == 0  # not while the leader's pull is in progress
        up.release()
        assert await drain(follower) == list(ANSWER)
        assert await task == list(ANSWER)
        assert up.starts == 1

    run(main)


def test_a_disconnect_during_a_shared_pull_waits_for_the_pull_and_spares_the_follower() -> None:
    async def main() -> None:
        sf = SingleFlight(max_buffer_bytes=1 << 20)
        up = Upstream(pause_at=1)
        stored: list[tuple[Event, ...]] = []
        clients: list[Client] = []

        async def leader() -> list[Event]:
            client, view = lead(sf, up, on_success=lambda e: stored.append(e))
            clients.append(client)
            return await drain(view)

        task = asyncio.create_task(leader())
        await settle()
        _, follower = sf.open("ns", "k", up.start)
        clients[0].disconnect()  # mid-pull, with a follower waiting
        await settle()
        assert not task.done() and up.closed == 0  # the cancel waits for the pull
        up.release()
        with pytest.raises(asyncio.CancelledError):
            await task  # cancelled once its pull was over
        assert clients[0].watch.disconnected
        assert await drain(follower) == list(ANSWER)
        assert up.starts == up.closed == 1
        assert stored == [ANSWER]

    run(main)


def test_a_disconnect_during_a_lone_pull_cuts_the_upstream_at_once() -> None:
    async def main() -> None:
        sf = SingleFlight(max_buffer_bytes=1 << 20)
        up = Upstream(pause_at=1)
        clients: list[Client] = []

        async def leader() -> None:
            client, view = lead(sf, up)
            clients.append(client)
            await drain(view)

        task = asyncio.create_task(leader())
        await settle()
        clients[0].disconnect()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert up.closed == 1 and up.yielded == 1  # the paused upstream was not waited for
        assert sf.in_flight() == 0
        up2 = Upstream()
        assert await drain(lead(sf, up2)[1]) == list(ANSWER)  # a new request starts afresh

    run(main)


def test_a_lone_leader_leaving_between_pulls_closes_the_upstream() -> None:
    async def main() -> None:
        sf = SingleFlight(max_buffer_bytes=1 << 20)
        up = Upstream()
        _, view = lead(sf, up)
        assert await view.__anext__() == ANSWER[0]
        await view.aclose()
        assert up.closed == 1
        assert sf.in_flight() == 0

    run(main)


def test_a_dropped_lone_leader_view_closes_the_upstream_and_is_forgotten() -> None:
    async def main() -> None:
        sf = SingleFlight(max_buffer_bytes=1 << 20)
        up = Upstream()
        _, view = lead(sf, up)
        await view.__anext__()
        del view
        gc.collect()
        await settle()
        assert up.closed == 1
        assert sf.in_flight() == 0
        assert sf.open("ns", "k", Upstream().start)[0]  # nobody joins the abandoned flight

    run(main)


def test_shutdown_cancels_an_inline_pull() -> None:
    async def main() -> None:
        sf = SingleFlight(max_buffer_bytes=1 << 20)
        up = Upstream(pause_at=1)

        async def leader() -> None:
            await drain(lead(sf, up)[1])

        task = asyncio.create_task(leader())
        await settle()
        await sf.aclose()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert up.closed == 1
        assert sf.in_flight() == 0

    run(main)


def test_a_failed_lone_pull_fails_the_leader_and_is_forgotten() -> None:
    async def main() -> None:
        sf = SingleFlight(max_buffer_bytes=1 << 20)
        boom = ProviderError(Failure.UPSTREAM_ERROR, "died")
        up = Upstream(ANSWER[:2], error=boom)
        _, view = lead(sf, up)
        got = [await view.__anext__(), await view.__anext__()]
        with pytest.raises(ProviderError) as caught:
            await view.__anext__()
        assert caught.value is boom and got == list(ANSWER[:2])
        assert up.closed == 1 and sf.in_flight() == 0

    run(main)
