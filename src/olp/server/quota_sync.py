"""Keep quota state on disk: load at start, save every few seconds, apply CLI resets."""

from __future__ import annotations

import asyncio

from olp.observability import event_logger
from olp.quota import QuotaBook, QuotaStore

__all__ = ["QuotaSync"]

log = event_logger("olp.quota")


class QuotaSync:
    def __init__(self, book: QuotaBook, store: QuotaStore, interval_s: float = 1.0) -> None:
        self.book = book
        self.store = store
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

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
        # SQLite work happens in a thread: never on the event loop.
        for provider in await asyncio.to_thread(self.store.take_resets):
            ended = self.book.cooldowns.reset(provider)
            log.info("cooldown_reset", provider=provider, cooldowns_ended=ended)
        await asyncio.to_thread(self.store.save, self.book.dump())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.sync()
        self.store.close()
