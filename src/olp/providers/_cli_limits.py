"""`max_concurrent` with a short bounded wait queue, for the CLI runner.

Unlike a plain semaphore, a full queue is refused at once (the engine then falls back)
instead of piling up waiters behind a busy CLI, and a waiter gives up after a deadline.
Slots are handed over in FIFO order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

__all__ = ["Slots"]


class Slots:
    def __init__(self, limit: int, queue_size: int) -> None:
        self.limit = max(1, limit)
        self.queue_size = max(0, queue_size)
        self.active = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self, wait_s: float, refused: Callable[[float | None], Exception]) -> None:
        """Take a slot, waiting at most `wait_s` in the queue.

        `refused(None)` is raised when the queue is full, `refused(wait_s)` when the wait
        ran out.
        """
        if self.active < self.limit and not self._waiters:
            self.active += 1
            return
        if len(self._waiters) >= self.queue_size:
            raise refused(None)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(wait_s):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                # The slot was handed to us just as we gave up: pass it on.
                self.release()
            else:
                waiter.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise refused(wait_s) from None
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the waiter: `active` unchanged
                return
        self.active -= 1
