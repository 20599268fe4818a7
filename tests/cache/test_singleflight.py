"""Streaming singleflight: one upstream per identical in-flight request, shared safely."""

from __future__ import annotations

import asyncio
import gc

import pytest
from cache_fakes import ANSWER, Upstream, drain, run, settle

from olp.cache.codec import estimate_size
from olp.cache.singleflight import SingleFlight
from olp.errors import Failure, ProviderError
from olp.ir import Event, Finish, ReasoningDelta, TextDelta, ToolCallDelta, Usage


def flights(max_bytes: int = 1 << 20) -> SingleFlight:
    return SingleFlight(max_buffer_bytes=max_bytes)


def test_fifty_concurrent_identical_requests_make_one_upstream_call() -> None:
    async def main() -> None:
        sf = flights()
        up = Upstream(delay=0.001)
        stored: list[tuple[Event, ...]] = []

        async def one() -> list[Event]:
            await asyncio.sleep(0)
            _, view = sf.open("ns", "k", up.start, on_success=lambda e: stored.append(e))
            return await drain(view)

        results = await asyncio.gather(*(one() for _ in range(50)))
        assert up.starts == 1
        assert all(r == list(ANSWER) for r in results)
        assert stored == [ANSWER]
        assert sf.in_flight() == 0

    run(main)


def test_a_follower_joining_mid_stream_gets_the_whole_answer() -> None:
    async def main() -> None:
        sf = flights()
        up = Upstream(pause_at=3)
        leader_is_first, leader = sf.open("ns", "k", up.start)
        assert leader_is_first
        assert [await leader.__anext__() for _ in range(3)] == list(ANSWER[:3])
        is_leader, follower = sf.open("ns", "k", up.start)
        assert not is_leader
        up.release()
        assert await drain(follower) == list(ANSWER)
        assert await drain(leader) == list(ANSWER[3:])
        assert up.starts == 1

    run(main)


def test_the_leader_leaving_does_not_cut_a_follower() -> None:
    async def main() -> None:
        sf = flights()
        up = Upstream(pause_at=2)
        stored: list[tuple[Event, ...]] = []
        _, leader = sf.open("ns", "k", up.start, on_success=lambda e: stored.append(e))
        _, follower = sf.open("ns", "k", up.start)
        assert await leader.__anext__() == ANSWER[0]
        await leader.aclose()  # the leader's client disconnects
        await settle()
        assert up.closed == 0
        up.release()
        assert await drain(follower) == list(ANSWER)
        assert stored == [ANSWER]  # a complete answer is still written

    run(main)


def test_a_cancelled_leader_task_does_not_cut_a_follower() -> None:
    async def main() -> None:
        sf = flights()
        up = Upstream(pause_at=2)

        async def leader() -> None:
            _, view = sf.open("ns", "k", up.start)
            await drain(view)

        task = asyncio.create_task(leader())
        await settle()
        _, follower = sf.open("ns", "k", up.start)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        up.release()
        assert await drain(follower) == list(ANSWER)
        assert up.starts == 1

    run(main)


def test_the_last_listener_leaving_cancels_the_upstream() -> None:
    async def main() -> None:
        sf = flights()
        up = Upstream(pause_at=2)
        stored: list[tuple[Event, ...]] = []
        _, a = sf.open("ns", "k", up.start, on_success=lambda e: stored.append(e))
        _, b = sf.open("ns", "k", up.start)
        assert await a.__anext__() == ANSWER[0]
        await a.aclose()
        assert up.closed == 0
        await b.aclose()
        assert up.closed == 1  # its finally ran before the last aclose() returned
        assert sf.in_flight() == 0
        assert stored == []
        # A later identical request starts afresh.
        up.release()
        assert await drain(sf.open("ns", "k", up.start)[1]) == list(ANSWER)
        assert up.starts == 2

    run(main)


def test_closing_before_the_upstream_started_is_clean() -> None:
    async def main() -> None:
        sf = flights()
        up = Upstream()
        _, view = sf.open("ns", "k", up.start)
        await view.aclose()
        await settle()
        assert up.starts == up.closed
        assert sf.in_flight() == 0

    run(main)


def test_shutdown_before_the_pump_ran_ends_the_flight_for_every_listener() -> None:
    async def main() -> None:
        sf = flights()
        up = Upstream()
        views = [sf.open("ns", "k", up.start)[1] for _ in range(2)]
        await sf.aclose()  # no await since `open`: the pump has not started yet
        for view in views:
            with pytest.raises(ProviderError, match="cancelled"):
                await view.__anext__()
        assert up.starts == 0
        assert sf.in_flight() == 0
        is_leader, view = sf.open("ns", "k", up.start)  # a new request starts afresh
        assert is_leader
        assert await drain(view) == list(ANSWER)

    run(main)


def test_a_failed_upstream_gives_every_listener_the_same_error_and_is_forgotten() -> None:
    async def main() -> None:
        sf = flights()
        boom = ProviderError(Failure.UPSTREAM_ERROR, "died")
        up = Upstream(ANSWER[:2], pause_at=1, error=boom)
        stored: list[tuple[Event, ...]] = []
        views = [
            sf.open("ns", "k", up.start, on_success=lambda e: stored.append(e))[1] for _ in range(3)
        ]

        async def collect(view: object) -> tuple[list[Event], BaseException | None]:
            got: list[Event] = []
            try:
                async for event in view:  # type: ignore[attr-defined]
                    got.append(event)
            except ProviderError as exc:
                return got, exc
            return got, None

        tasks = [asyncio.create_task(collect(v)) for v in views]
        await settle()
        up.release()
        results = await asyncio.gather(*tasks)
        assert all(got == list(ANSWER[:2]) and exc is boom for got, exc in results)
        assert stored == []
        assert sf.in_flight() == 0
        # The error is not replayed to a later arrival: it leads a new call.
        is_leader, view = sf.open("ns", "k", Upstream().start)
        assert is_leader
        assert await drain(view) == list(ANSWER)

    run(main)


def test_a_start_that_raises_fails_every_listener() -> None:
    async def main() -> None:
        sf = flights()

        def start() -> object:
            raise ProviderError(Failure.CONCURRENCY_LIMIT, "busy")

        _, a = sf.open("ns", "k", start)  # type: ignore[arg-type]
        _, b = sf.open("ns", "k", start)  # type: ignore[arg-type]
        for view in (a, b):
            with pytest.raises(ProviderError, match="busy"):
                await view.__anext__()
        assert sf.in_flight() == 0

    run(main)


def test_an_answer_over_the_buffer_limit_streams_on_but_is_not_shared_or_stored() -> None:
    async def main() -> None:
        sf = flights(max_bytes=100)
        events = [TextDelta(f"chunk {i:04d} ") for i in range(1000)]
        up = Upstream(events, pause_at=500)
        stored: list[tuple[Event, ...]] = []
        _, a = sf.open("ns", "k", up.start, on_success=lambda e: stored.append(e))
        got = [await a.__anext__() for _ in range(499)]
        # Past the limit the flight is no longer joinable: a new request leads its own.
        up2 = Upstream()
        is_leader, b = sf.open("ns", "k", up2.start)
        assert is_leader
        assert await drain(b) == list(ANSWER)
        up.release()
        got += await drain(a)
        assert got == events
        assert stored == []

    run(main)


@pytest.mark.parametrize("spare", [0, -1])
def test_a_flight_sizes_every_kind_of_event_as_the_codec_estimates_it(spare: int) -> None:
    # The limit must fall exactly where `codec.estimate_size` puts it, for every kind of
    # event.
    answer: list[Event] = [
        TextDelta("héllo"),
        ReasoningDelta("thinking"),
        ToolCallDelta(0, "call_1", "lookup", '{"q": 1}'),
        Usage(10, 5, 0, 0, 0, 0.001),
        Finish("stop"),
    ]
    size = sum(estimate_size(event) for event in answer)

    async def main() -> None:
        sf = flights(max_bytes=size + spare)
        stored: list[tuple[Event, ...]] = []
        _, view = sf.open("ns", "k", Upstream(answer).start, on_success=stored.append)
        assert await drain(view) == answer
        assert stored == ([tuple(answer)] if spare == 0 else [])  # one byte over: not kept

    run(main)


def test_the_buffer_drops_what_every_listener_has_read_once_over_the_limit() -> None:
    async def main() -> None:
        sf = flights(max_bytes=100)
        events = [TextDelta("x" * 20) for _ in range(5000)]
        up = Upstream(events, pause_at=4999)
        _, view = sf.open("ns", "k", up.start)
        for _ in range(4999):
            await view.__anext__()
        flight = view._flight
        assert len(flight.events) < 1000  # the read prefix was dropped
        up.release()
        assert len(await drain(view)) == 1

    run(main)


def test_views_dropped_without_aclose_stop_the_upstream() -> None:
    async def main() -> None:
        sf = flights()
        up = Upstream([TextDelta("x")] * 100, pause_at=1)
        _, view = sf.open("ns", "k", up.start)
        await view.__anext__()
        del view
        gc.collect()
        up.release()
        for _ in range(20):
            await asyncio.sleep(0)
        assert up.closed == 1
        assert up.yielded < 100
        assert sf.in_flight() == 0

    run(main)


def test_in_flight_counts_per_namespace_and_shutdown_cancels() -> None:
    async def main() -> None:
        sf = flights()
        ups = [Upstream(pause_at=1) for _ in range(3)]
        a = sf.open("alice", "k1", ups[0].start)[1]
        b = sf.open("alice", "k2", ups[1].start)[1]
        c = sf.open("bob", "k1", ups[2].start)[1]
        sf.open("bob", "k1", ups[2].start)  # a follower is not another flight
        assert sf.in_flight() == 3
        assert sf.in_flight_by_namespace() == {"alice": 2, "bob": 1}
        assert sf.in_flight("alice") == 2
        await settle()
        await sf.aclose()
        assert [u.closed for u in ups] == [1, 1, 1]
        for view in (a, b, c):
            assert await view.__anext__() == ANSWER[0]
            with pytest.raises(ProviderError, match="cancelled"):
                await view.__anext__()
        assert sf.in_flight() == 0

    run(main)


def test_namespaces_do_not_share_flights() -> None:
    async def main() -> None:
        sf = flights()
        up = Upstream(pause_at=1)
        alice = sf.open("alice", "k", up.start)
        bob = sf.open("bob", "k", up.start)  # views held: a dropped one ends its flight
        assert alice[0] and bob[0]
        await settle()
        assert up.starts == 2
        await sf.aclose()

    run(main)
