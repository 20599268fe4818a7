"""Many deadlines on one timer: `asyncio.timeout()` without a loop timer for each.

    deadlines = Deadlines()
    with deadlines.at(loop.time() + 30):  # raises TimeoutError if the block overruns
        chunk = await response.content.readany()

OLP sets a deadline on every request body and on every upstream read. With uvloop, each
`asyncio.timeout()` creates, starts, stops and closes a libuv timer handle, a few
microseconds every time, and almost all of them are cancelled unused. Here a deadline is an
entry in a bucket of `resolution_s` (a dict, O(1) to add and to remove), and one timer,
running only while some deadline is pending, expires whole buckets: a deadline fires at
most `resolution_s` late, never early.

Semantics follow `asyncio.timeout()`: expiry cancels the task that entered the block, and
the block's exit turns that cancellation into `TimeoutError`, unless the task was also
cancelled by someone else (shutdown, a client that went away), which then propagates.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType

__all__ = ["Deadline", "Deadlines"]


class Deadline:
    """One pending deadline; use it as a context manager around the awaits it bounds."""

    __slots__ = ("_cancelling", "_owner", "_task", "_tick", "expired")

    def __init__(self, owner: Deadlines, task: asyncio.Task[object], tick: int) -> None:
        self._owner = owner
        self._task = task
        self._tick = tick
        self._cancelling = task.cancelling()
        self.expired = False

    def __enter__(self) -> Deadline:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.expired:
            self._owner.discard(self)
            return
        if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc


class Deadlines:
    """Deadlines on the running loop's clock, all kept by one timer (see the module doc)."""

    __slots__ = ("_buckets", "_loop", "_next_tick", "_resolution_s", "_timer")

    def __init__(self, resolution_s: float = 0.02) -> None:
        self._resolution_s = resolution_s
        self._buckets: dict[int, dict[Deadline, None]] = {}
        self._next_tick = 0  # every bucket below it has been expired (while the timer runs)
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def at(self, when: float) -> Deadline:
        """A deadline at loop time `when` for the current task."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadlines.at() needs a running task")
        loop = task.get_loop()
        if self._timer is None or loop is not self._loop:
            # Nothing pending (or what is pending belongs to a loop that is gone, as
            # between two `asyncio.run()`s): start the clock at the current tick.
            self._buckets.clear()
            self._loop = loop
            self._next_tick = math.floor(loop.time() / self._resolution_s)
            self._arm(loop)
        tick = max(math.ceil(when / self._resolution_s), self._next_tick)
        deadline = Deadline(self, task, tick)
        bucket = self._buckets.get(tick)
        if bucket is None:
            bucket = self._buckets[tick] = {}
        bucket[deadline] = None
        return deadline

    def after(self, delay_s: float) -> Deadline:
        return self.at(asyncio.get_running_loop().time() + delay_s)

    def discard(self, deadline: Deadline) -> None:
        bucket = self._buckets.get(deadline._tick)
        if bucket is not None:
            bucket.pop(deadline, None)
            if not bucket:
                del self._buckets[deadline._tick]

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._buckets.values())

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_at(self._next_tick * self._resolution_s, self._expire)

    def _expire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now_tick = math.floor(loop.time() / self._resolution_s)
        for tick in range(self._next_tick, now_tick + 1):
            bucket = self._buckets.pop(tick, None)
            for deadline in bucket or ():
                deadline.expired = True
                deadline._task.cancel()
        self._next_tick = now_tick + 1
        if self._buckets:
            self._arm(loop)
