"""The shared store: answers in Redis, for several OLP replicas, behind a memory front.

    cache: {"redis_url": "redis://127.0.0.1:6379/0"}

What lives where:
- **Redis** holds every answer (`redis_keys` has the layout), with its TTL (`PX`) and each
  namespace's LRU order and entry limit, kept by Lua scripts in one round trip each;
- each replica's **memory front** (`MemoryStore`) holds the answers it wrote or read
  lately: a hit there costs no round trip. A miss there asks Redis (`on_disk` is true
  whenever Redis is up), so an answer one replica wrote is a hit on every other.

Writes never wait: they queue, and one task sends what queued as one pipeline. Redis
being down or slow never fails a request: reads count as misses, writes are dropped
(the cache is disposable), one warning says so, and Redis is retried a few seconds
later. A clear bumps a counter in Redis that every replica polls each second, dropping
that namespace from its memory front; the same poll keeps the figures of `stats()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError

from olp.cache.codec import decode_events, encode_events
from olp.cache.memory import DEFAULT_MEMORY_BYTES, Clock, Entry, MemoryStore
from olp.cache.redis_keys import ALL, CLEAR, GET, PUT, STATS, Layout, parse_stats
from olp.cache.store import CachedAnswer, StoreStats
from olp.config import CacheConfig
from olp.errors import CacheUnavailable
from olp.ir import Event
from olp.observability import event_logger, redacted_url

__all__ = ["DEFAULT_MAX_QUEUED_BYTES", "DEFAULT_RETRY_AFTER_S", "RedisStore"]

log = event_logger("olp.cache")

_TIMEOUT_S = 0.5  # a read slower than this is a miss: the upstream is the fallback
DEFAULT_RETRY_AFTER_S = 5.0  # after a failure, leave Redis alone this long
_POLL_S = 1.0  # how often replicas look for clears
_STATS_EVERY = 5  # polls between two refreshes of the entries and bytes
# Answers waiting to be written beyond this are dropped (Redis is far behind).
DEFAULT_MAX_QUEUED_BYTES = 64 * 1024 * 1024
_DECODE_INLINE_BYTES = 256 * 1024
_Write = tuple[str, str, bytes]  # namespace, key, body


class RedisStore(MemoryStore):
    def __init__(
        self,
        url: str,
        config: CacheConfig,
        clock: Clock = time.time,
        *,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
        retry_after_s: float = DEFAULT_RETRY_AFTER_S,
    ) -> None:
        super().__init__(config, clock, max_total_bytes=memory_bytes)
        self.url = url
        self._max_queued_bytes = max_queued_bytes
        self._retry_after_s = retry_after_s
        self._keys = Layout(config.redis_prefix)
        # No connection yet: the client connects on its first command, in `start()`.
        # One attempt per command: a failure is a miss here, and retrying is our backoff's
        # business, not a request's wait.
        self._redis = aioredis.Redis.from_url(
            url,
            socket_timeout=_TIMEOUT_S,
            socket_connect_timeout=_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
        )
        self._get = self._redis.register_script(GET)
        self._put = self._redis.register_script(PUT)
        self._clear = self._redis.register_script(CLEAR)
        self._stats = self._redis.register_script(STATS)
        self._down_until = 0.0  # monotonic; reads and writes skip Redis until then
        self._down = False
        self._queue: deque[_Write] = deque()
        self._queued_bytes = 0
        self._wake = asyncio.Event()
        self._sending = asyncio.Lock()  # held while a batch is on its way
        self._tasks: list[asyncio.Task[None]] = []
        self._epochs: dict[str, int] | None = None  # as last seen; None before the first poll
        self._shared: dict[str, tuple[int, int]] | None = None  # namespace -> entries, bytes
        self._stats_due = True  # this replica changed Redis since `_shared` was read

    @property
    def persistent(self) -> bool:
        return True

    @property
    def kind(self) -> str:
        return "redis"

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (a warning if Redis is not there yet), then write and poll in the background."""
        await self._poll(during="start")
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._write_loop(), name="olp-cache-redis-writer"),
            loop.create_task(self._poll_loop(), name="olp-cache-redis-poll"),
        ]

    async def aclose(self) -> None:
        """Send the writes still queued (a few seconds at most), then disconnect."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(3 * _TIMEOUT_S):
                await self.flush()
        await self._redis.aclose()

    # -- reads ---------------------------------------------------------------------------

    def on_disk(self, namespace: str, key: str) -> bool:
        # Any replica may have written it: only Redis knows, unless Redis is down.
        return not self._skipping()

    async def get(self, namespace: str, key: str) -> CachedAnswer | None:
        answer = self.lookup(namespace, key)
        if answer is not None or self._skipping():
            return answer
        try:
            reply = await self._get(
                keys=[self._keys.entry(namespace, key), self._keys.lru(namespace)],
                args=[self._clock(), key],
            )
        except (RedisError, OSError) as exc:
            self._failed("read", exc)
            return None
        self._up()
        if not reply:
            return None
        body, ms_left = bytes(reply[0]), int(reply[1])
        # A large answer is decoded in a thread: milliseconds of parsing would stall the loop.
        big = len(body) > _DECODE_INLINE_BYTES
        events = await asyncio.to_thread(decode_events, body) if big else decode_events(body)
        if events is None or ms_left <= 0:  # another codec version's entry: a miss
            return None
        return self._adopt(namespace, key, events, body, ms_left / 1000)

    def _adopt(
        self, namespace: str, key: str, events: tuple[Event, ...], body: bytes, ttl_s: float
    ) -> CachedAnswer | None:
        """Hold an answer read from Redis in the memory front, until Redis expires it."""
        current = self.lookup(namespace, key)
        if current is not None:  # (written here while we read)
            return current
        now = self._clock()
        answer = CachedAnswer(events, len(body), now, now + ttl_s)
        entry = Entry(namespace, key, 0, len(body), now, now + ttl_s, None)
        self.index(entry)
        self.load(entry, answer)
        return answer

    # -- writes --------------------------------------------------------------------------

    def put(self, namespace: str, key: str, events: Sequence[Event]) -> bool:
        body = encode_events(events)
        if self.new_entry(namespace, key, events, body, 0) is None:
            return False
        if self._skipping():
            return True
        if self._queued_bytes + len(body) > self._max_queued_bytes:
            log.warning("cache_redis_write_dropped", queued_bytes=self._queued_bytes)
            return True
        self._queue.append((namespace, key, body))
        self._queued_bytes += len(body)
        self._wake.set()
        return True

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def flush(self) -> bool:
        """Send everything queued now; False if Redis failed (and the writes were dropped)."""
        async with self._sending:
            while self._queue:
                if not await self._send_writes():
                    return False
        return True

    async def _send_writes(self) -> bool:
        """One pipeline of what is queued; False (the writes dropped) if Redis failed."""
        batch = [self._queue.popleft() for _ in range(min(len(self._queue), 256))]
        self._queued_bytes -= sum(len(body) for _, _, body in batch)
        try:
            try:
                await self._pipeline_puts(batch)
            except NoScriptError:  # Redis restarted (or SCRIPT FLUSH) since the last write
                await self._redis.script_load(PUT)
                await self._pipeline_puts(batch)
        except (RedisError, OSError) as exc:
            self._failed("write", exc, dropped=len(batch) + len(self._queue))
            self._queue.clear()
            self._queued_bytes = 0
            return False
        self._up()
        self._stats_due = True
        return True

    async def _pipeline_puts(self, batch: list[_Write]) -> None:
        # EVALSHA by hand, not through the Script object: with a pipeline, that one asks
        # SCRIPT EXISTS first, a second round trip for every batch.
        cfg, keys, now = self._config, self._keys, self._clock()
        async with self._redis.pipeline(transaction=False) as pipe:
            for namespace, key, body in batch:
                pipe.evalsha(
                    self._put.sha, 3,
                    keys.entry(namespace, key), keys.lru(namespace), keys.spaces,
                    body, cfg.ttl_s * 1000, now, key, cfg.max_entries_per_key,
                    keys.entry_prefix(namespace), namespace,
                )  # fmt: skip
            await pipe.execute()

    async def aclear(self, namespace: str | None = None) -> int:
        """Delete from Redis (every replica follows within a second) and from memory."""
        dropped = self.clear(namespace)
        target = namespace or ALL
        try:
            deleted, epoch = await self._clear(
                keys=[self._keys.spaces, self._keys.epochs], args=[self._keys.cache, target]
            )
        except (RedisError, OSError) as exc:
            self._failed("clear", exc)
            raise CacheUnavailable(
                f"The shared cache (Redis at {redacted_url(self.url)}) did not answer: {exc}. "
                f"Only this replica's memory was cleared; try again once Redis is back."
            ) from exc
        self._up()
        if self._epochs is not None:
            self._epochs[target] = int(epoch)  # done here already: the poll must not redo it
        self._stats_due = True
        return max(int(deleted), dropped)

    # -- clears from elsewhere, and the figures ------------------------------------------

    async def _poll_loop(self) -> None:
        polls = 0
        while True:
            await asyncio.sleep(_POLL_S)
            polls += 1
            # Other replicas' writes show within `_STATS_EVERY` polls, this one's at the next.
            await self._poll(stats=self._stats_due or polls % _STATS_EVERY == 0)

    async def _poll(self, *, stats: bool = True, during: str = "poll") -> None:
        if self._skipping():
            return
        if stats:
            self._stats_due = False
        try:
            raw: dict[Any, Any] = await self._redis.hgetall(self._keys.epochs)
            flat = (
                await self._stats(keys=[self._keys.spaces], args=[self._keys.cache])
                if stats
                else None
            )
        except (RedisError, OSError) as exc:
            self._stats_due = self._stats_due or stats
            self._failed(during, exc)
            return
        self._up()
        epochs = {_text(k): int(v) for k, v in raw.items()}
        if self._epochs is not None:
            self._apply_clears(epochs)
        self._epochs = epochs
        if flat is not None:
            self._shared = parse_stats(flat)

    def _apply_clears(self, epochs: dict[str, int]) -> None:
        assert self._epochs is not None
        changed = [ns for ns, n in epochs.items() if self._epochs.get(ns) != n]
        if ALL in changed:
            changed = [ALL]
        for namespace in changed:
            dropped = self.clear(None if namespace == ALL else namespace)
            log.info(
                "cache_cleared",
                namespace=namespace,
                entries=dropped,
                by="another replica or olp cache clear",
            )

    def stats(self, namespace: str | None = None) -> StoreStats:
        if self._shared is None:  # not polled yet: what this replica holds
            return super().stats(namespace)
        names = self._shared if namespace is None else [namespace]
        figures = [self._shared.get(name, (0, 0)) for name in names]
        return StoreStats(sum(n for n, _ in figures), sum(b for _, b in figures))

    def namespaces(self) -> list[str]:
        return sorted(set(super().namespaces()) | set(self._shared or ()))

    # -- Redis up or down ----------------------------------------------------------------

    def _skipping(self) -> bool:
        return self._down and time.monotonic() < self._down_until

    def _failed(self, what: str, exc: BaseException, **extra: Any) -> None:
        self._down_until = time.monotonic() + self._retry_after_s
        if not self._down:
            self._down = True
            log.warning(
                "cache_redis_unavailable", url=redacted_url(self.url), during=what,
                error=repr(exc), retry_in_s=self._retry_after_s, **extra,
            )  # fmt: skip

    def _up(self) -> None:
        if self._down:
            self._down = False
            log.warning("cache_redis_recovered", url=redacted_url(self.url))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
