"""A scriptable, counting upstream for the cache tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from olp.ir import Event, Finish, TextDelta, Usage

T = TypeVar("T")

ANSWER: tuple[Event, ...] = (
    TextDelta("Hel"),
    TextDelta("lo"),
    TextDelta(", world"),
    Usage(prompt_tokens=5, completion_tokens=3),
    Finish("stop"),
)


class Upstream:
    """Counts `start()` calls; yields `events`, pausing before index `pause_at` until
    `release()`; raises `error` after its events; records that its `finally` ran."""

    def __init__(
        self,
        events: Sequence[Event] = ANSWER,
        *,
        pause_at: int | None = None,
        error: BaseException | None = None,
        delay: float = 0.0,
    ) -> None:
        self.events = tuple(events)
        self.pause_at = pause_at
        self.error = error
        self.delay = delay
        self.starts = 0
        self.yielded = 0
        self.closed = 0
        self.gate = asyncio.Event()

    def release(self) -> None:
        self.gate.set()

    def start(self) -> AsyncIterator[Event]:
        self.starts += 1
        return self._stream()

    async def _stream(self) -> AsyncIterator[Event]:
        try:
            for i, event in enumerate(self.events):
                if i == self.pause_at:
                    await self.gate.wait()
                if self.delay:
                    await asyncio.sleep(self.delay)
                self.yielded += 1
                yield event
            if self.error is not None:
                raise self.error
        finally:
            self.closed += 1


async def drain(events: AsyncIterator[Event]) -> list[Event]:
    out: list[Event] = []
    try:
        async for event in events:
            out.append(event)
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    return out


async def settle(rounds: int = 5) -> None:
    """Let other tasks run a few loop iterations."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(main())
