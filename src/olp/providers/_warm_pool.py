"""CLI processes started ahead of their request, each waiting for its prompt on stdin.

A CLI spends most of a short request starting up (seconds for Claude Code on a busy
machine); one started ahead answers as soon as it is given its prompt. The pool belongs to
a `CliRunner` and holds at most `size` waiting processes across all invocation keys:

- a key is everything fixed when a process starts (`CliInvocation.warm_key`: arguments,
  environment, home files, credentials); only the prompt is given later;
- `take(key)` hands over a waiting process of that key, or None (a miss); each process
  serves one request and then ends — never reused, so no request sees another's context;
- `refill(key, invocation)` starts a replacement for that key and fills whatever room is
  left with more of it: with one key in use, `size` processes wait. When the pool is full,
  it makes room by stopping a waiting process of the least recently used other key that
  has more than one waiting or was asked for less often than `key` among the last
  `_WINDOW` requests (and only for a `key` asked for at least twice). So a one-off
  request (an unusual `max_tokens`) does not push out the processes of the common one,
  two kinds of requests taking turns (with client tools and without) share the pool,
  and on a pool of one they do not stop each other's process on every request: the kind
  waiting keeps its place until the other is asked for more often;
- a process that waited `max_idle_s` is replaced by a fresh one (what a CLI read at start
  goes stale); one whose owner's credential files changed since it started is dropped when
  found (it may hold a token the CLI has since refreshed); one that exits while waiting is
  dropped and not replaced, so a CLI that cannot start does not loop;
- `aclose()` stops every waiting process and any further start.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from olp.errors import ProviderError
from olp.observability import event_logger
from olp.providers._cli_process import CliProcess
from olp.providers._sandbox import Sandbox

if TYPE_CHECKING:
    from olp.providers._mcp_bridge import Endpoint

__all__ = ["DEFAULT_MAX_IDLE_S", "WarmChild", "WarmPool"]

log = event_logger("olp.providers.cli")

DEFAULT_MAX_IDLE_S = 600.0
# The requests whose keys are counted (for the admission rule above).
_WINDOW = 16
# What a process is started for (a `CliInvocation`; generic so this module stays below
# the runner that owns it).
Invocation = TypeVar("Invocation")


@dataclass(slots=True, eq=False)
class WarmChild:
    """A process started ahead, in its own sandbox, and what it was started with."""

    process: CliProcess
    box: Sandbox
    # The owner's credential files as they were when it started (see `CliRunner`).
    credentials_stamp: Hashable
    # Its MCP bridge endpoint, for a child that takes client tools (`CliRunner`).
    endpoint: Endpoint | None = None
    watcher: asyncio.Task[None] | None = field(default=None, repr=False)


class WarmPool(Generic[Invocation]):
    """See the module docstring. `start` makes one waiting child for an invocation (it may
    raise `ProviderError`); `stop` ends a child that will not serve and removes its
    sandbox; `stamp` gives the current credentials stamp of an invocation."""

    def __init__(
        self,
        provider: str,
        size: int,
        *,
        start: Callable[[Invocation], Awaitable[WarmChild]],
        stop: Callable[[WarmChild], Coroutine[object, object, None]],
        stamp: Callable[[Invocation], Hashable],
        max_idle_s: float = DEFAULT_MAX_IDLE_S,
    ) -> None:
        self.provider = provider
        self.size = size
        self.hits = 0
        self.misses = 0
        self._start = start
        self._stop = stop
        self._stamp = stamp
        self._max_idle_s = max_idle_s
        # Least recently used key first.
        self._waiting: OrderedDict[Hashable, deque[WarmChild]] = OrderedDict()
        self._starting = 0
        # The keys of the last `_WINDOW` requests.
        self._recent: deque[Hashable] = deque(maxlen=_WINDOW)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def waiting(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())

    @property
    def starting(self) -> int:
        return self._starting

    def take(self, key: Hashable, invocation: Invocation) -> WarmChild | None:
        """A live waiting process of `key` with current credentials, or None."""
        self._remember(key)
        queue = self._waiting.get(key, deque())
        stamp = self._stamp(invocation)
        while queue:
            child = self._pop(key, queue)
            if child.watcher is not None:
                child.watcher.cancel()
            if child.process.returncode is None and child.credentials_stamp == stamp:
                self.hits += 1
                return child
            why = "exited" if child.process.returncode is not None else "credentials changed"
            log.info("cli_warm_dropped", provider=self.provider, pid=child.process.pid, why=why)
            self._background(self._stop(child))
        self.misses += 1
        return None

    def discard(self, child: WarmChild) -> None:
        """Stop a process `take()` gave that will not serve after all, in the background
        (`aclose()` waits for it)."""
        self._background(self._stop(child))

    def count_as_miss(self) -> None:
        """The process `take()` just gave could not serve after all (the runner found it
        unable to take the request's tools): a miss, not a hit."""
        self.hits -= 1
        self.misses += 1

    def refill(self, key: Hashable, invocation: Invocation) -> None:
        """Start one process for `key`, making room if the pool is full, then more for
        it while the pool has room (never evicting for those)."""
        if self._closed or self.size <= 0:
            return
        if key in self._waiting:
            self._waiting.move_to_end(key)
        full = self.waiting + self._starting >= self.size
        if full and not self._evict_other(key):
            return
        while True:
            self._starting += 1
            self._background(self._start_one(key, invocation))
            if self.waiting + self._starting >= self.size:
                return

    async def aclose(self) -> None:
        """Stop every waiting process; no more are started. Idempotent."""
        self._closed = True
        children = [child for queue in self._waiting.values() for child in queue]
        self._waiting.clear()
        for child in children:
            if child.watcher is not None:
                child.watcher.cancel()
            # Tasks of their own: a caller cancelled meanwhile does not cut a stop short.
            self._background(self._stop(child))
        while self._tasks:
            # A start under way finishes (a process is never left untracked) and, the pool
            # being closed, stops what it started; so does a recycling watcher.
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- inside ------------------------------------------------------------------------

    def _remember(self, key: Hashable) -> None:
        self._recent.append(key)

    def _add(self, key: Hashable, child: WarmChild) -> None:
        queue = self._waiting.get(key)
        if queue is None:
            queue = self._waiting[key] = deque()
        self._waiting.move_to_end(key)
        queue.append(child)

    def _pop(self, key: Hashable, queue: deque[WarmChild]) -> WarmChild:
        """The oldest of `key`'s waiting processes; a key with none left is forgotten (a
        request with a key of its own, e.g. an unusual `max_tokens`, leaves nothing)."""
        child = queue.popleft()
        if not queue:
            del self._waiting[key]
        return child

    def _evict_other(self, key: Hashable) -> bool:
        """Stop the oldest waiting process of the least recently used other key with more
        than one waiting or asked for less often than `key` lately (module docstring)."""
        asked = Counter(self._recent)
        if asked[key] < 2:
            return False
        for other, queue in self._waiting.items():
            if other != key and (len(queue) > 1 or asked[other] < asked[key]):
                child = self._pop(other, queue)
                if child.watcher is not None:
                    child.watcher.cancel()
                self._background(self._stop(child))
                return True
        return False

    async def _start_one(self, key: Hashable, invocation: Invocation) -> None:
        try:
            child = await self._start(invocation)
        except ProviderError as exc:
            log.warning("cli_warm_start_failed", provider=self.provider, error=exc.message)
            return
        except Exception:  # a bug here must not go unreported, nor end the pool
            log.error("cli_warm_start_failed", provider=self.provider, exc_info=True)
            return
        finally:
            self._starting -= 1
        if self._closed:
            await self._stop(child)
            return
        self._add(key, child)
        child.watcher = self._background(self._watch(key, invocation, child))

    async def _watch(self, key: Hashable, invocation: Invocation, child: WarmChild) -> None:
        """Recycle `child` after `max_idle_s`, or drop it if it exits while waiting."""
        exited = await child.process.exited_within(self._max_idle_s)
        queue = self._waiting.get(key)
        if queue is None or child not in queue:
            return  # taken meanwhile
        queue.remove(child)
        if not queue:
            del self._waiting[key]
        child.watcher = None  # this very task: nothing to cancel any more
        if exited:
            log.warning(
                "cli_warm_exited",
                provider=self.provider,
                pid=child.process.pid,
                status=child.process.returncode,
                stderr=child.process.stderr_tail()[-300:],
            )
        await self._stop(child)
        if not exited:
            self.refill(key, invocation)

    def _background(self, coro: Coroutine[object, object, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
