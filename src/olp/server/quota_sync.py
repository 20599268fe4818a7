"""Keep quota state on disk: load at start, save what changed, apply CLI resets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import orjson

from olp.observability import event_logger
from olp.quota import QuotaBook, QuotaStore

__all__ = ["QuotaSync"]

log = event_logger("olp.quota")

T = TypeVar("T")


class QuotaSync:
    """The quota file's one user in the server, from one thread of its own.

    Every store call runs on that single thread, never on the event loop, and never two at
    once: they share one SQLite connection, and cancelling a caller (the periodic save at
    shutdown) does not stop a call already running in its thread. With a thread per call,
    the final save at shutdown began its transaction inside the cancelled one's
    ("cannot start a transaction within a transaction").
    """

    def __init__(self, book: QuotaBook, store: QuotaStore, interval_s: float = 1.0) -> None:
        self.book = book
        self.store = store
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._io = ThreadPoolExecutor(1, thread_name_prefix="olp-quota")
        self._saved: bytes | None = None  # the state last written, encoded

    def load(self) -> None:
        state, _ = self.store.load()
        self.book.load(state)
        for provider in self.store.take_resets():
            self.book.cooldowns.reset(provider)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.sync()
            except Exception:
                log.error("quota_sync_failed", exc_info=True)

    async def sync(self) -> None:
        for provider in await self._call(self.store.take_resets):
            ended = self.book.cooldowns.reset(provider)
            log.info("cooldown_reset", provider=provider, cooldowns_ended=ended)
        state = self.book.dump()
        # Only a change is written: an idle server would otherwise rewrite the same rows
        # every second, about 1 GB a day of disk writes for nothing.
        encoded = orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
        if encoded == self._saved:
            return
        await self._call(lambda: self.store.save(state))
        self._saved = encoded

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.sync()  # (queued behind a save the cancel left running, if any)
        await self._call(self.store.close)
        self._io.shutdown(wait=False)

    async def _call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn)
