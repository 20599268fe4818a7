"""`Deadlines`: asyncio.timeout() semantics on one shared timer."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from olp.deadlines import Deadlines

RES = 0.02


def run(main: object) -> None:
    uvloop.run(main)  # type: ignore[arg-type]


def test_a_late_block_raises_timeout_error_on_time() -> None:
    async def main() -> float:
        # Deadlines live on the loop's clock: uvloop's counts milliseconds and is read once
        # per loop turn, so it can trail time.perf_counter() by a millisecond or so, and
        # "never early" holds on the loop's clock, which is the one measured here.
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(RES)
        started = loop.time()
        with pytest.raises(TimeoutError), deadlines.after(0.1):
            await asyncio.sleep(5)
        assert len(deadlines) == 0
        return loop.time() - started

    elapsed = uvloop.run(main())
    assert 0.1 <= elapsed < 0.1 + RES + 0.2  # never early; at most a tick late (+ slack)


def test_a_block_that_finishes_in_time_leaves_nothing_behind() -> None:
    async def main() -> None:
        deadlines = Deadlines(RES)
        for _ in range(1000):
            with deadlines.after(0.05) as deadline:
                await asyncio.sleep(0)
            assert not deadline.expired
        assert len(deadlines) == 0
        await asyncio.sleep(0.1)  # the timer runs dry and stops

    run(main())


def test_only_the_overdue_ones_expire() -> None:
    async def one(deadlines: Deadlines, limit_s: float, work: float) -> str:
        try:
            with deadlines.after(limit_s):
                await asyncio.sleep(work)
        except TimeoutError:
            return "timeout"
        return "done"

    async def main() -> list[str]:
        deadlines = Deadlines(RES)
        jobs = [one(deadlines, 0.1, 0.3), one(deadlines, 0.3, 0.05), one(deadlines, 0.05, 5)]
        return list(await asyncio.gather(*jobs))

    assert uvloop.run(main()) == ["timeout", "done", "timeout"]


def test_another_cancellation_is_not_turned_into_a_timeout() -> None:
    async def main() -> None:
        deadlines = Deadlines(RES)

        async def guarded() -> None:
            with deadlines.after(10):
                await asyncio.sleep(10)

        task = asyncio.create_task(guarded())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(deadlines) == 0

    run(main())


def test_a_deadline_already_past_fires_at_the_next_tick() -> None:
    async def main() -> None:
        deadlines = Deadlines(RES)
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError), deadlines.at(loop.time() - 1):
            await asyncio.sleep(1)

    run(main())


def test_it_works_again_after_an_idle_spell() -> None:
    async def main() -> None:
        deadlines = Deadlines(RES)
        for _ in range(2):
            with pytest.raises(TimeoutError), deadlines.after(0.03):
                await asyncio.sleep(1)
            await asyncio.sleep(0.15)  # nothing pending: the timer stops

    asyncio.run(main())  # the default loop too, not only uvloop


def test_one_instance_serves_one_loop_after_another() -> None:
    deadlines = Deadlines(RES)

    async def quick() -> None:
        with deadlines.after(5):  # leaves the timer armed on this loop as it closes
            await asyncio.sleep(0)

    async def late() -> None:
        with pytest.raises(TimeoutError), deadlines.after(0.05):
            await asyncio.sleep(1)

    asyncio.run(quick())
    asyncio.run(late())  # a new loop: the old loop's timer is dead, a new one is armed
