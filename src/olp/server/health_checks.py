"""Provider health checks for `/health`, the status endpoint and the dashboard.

A provider's `health()` is not free: HTTP providers call the upstream's model list, CLI
providers spawn `<cli> --version` (taking a concurrency slot). A dashboard polling every
few seconds must not turn into a stream of spawns, so results are kept for `ttl_s` and
refreshed by one background task at a time, each check bounded by `timeout_s`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from olp.observability import event_logger
from olp.providers.base import Provider
from olp.server.recent import scrub

__all__ = ["HealthChecks"]

log = event_logger("olp.server")


class HealthChecks:
    def __init__(self, ttl_s: float = 60.0, timeout_s: float = 10.0) -> None:
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self._results: dict[str, dict[str, Any]] = {}
        self._checked_at = 0.0  # monotonic time of the last completed round; 0: never
        self._task: asyncio.Task[None] | None = None
        # A round under way when the providers changed checks the old ones: its results
        # are dropped, and it still ends (or is cancelled at shutdown) as one of these.
        self._outdated: set[asyncio.Task[None]] = set()

    def results(self) -> dict[str, dict[str, Any]]:
        """The last result per provider: {ok, checks, fix, latency_ms, checked_at}."""
        return self._results

    def forget(self) -> None:
        """Make the next look start a new round (the providers changed: a config reload)."""
        self._checked_at = 0.0
        self._results = {}
        task, self._task = self._task, None
        if task is not None and not task.done():
            self._outdated.add(task)
            task.add_done_callback(self._outdated.discard)

    def refresh_if_stale(self, providers: Mapping[str, Provider]) -> asyncio.Task[None] | None:
        """Start a round in the background if the last one is older than `ttl_s`.

        Returns the running round (new or already under way), or None when fresh.
        """
        if self._task is not None and not self._task.done():
            return self._task
        if self._checked_at and time.monotonic() - self._checked_at < self.ttl_s:
            return None
        self._task = asyncio.ensure_future(self._round(dict(providers)))
        return self._task

    async def fresh(
        self, providers: Mapping[str, Provider], max_wait_s: float | None = None
    ) -> dict[str, dict[str, Any]]:
        """Results no older than `ttl_s`, waiting (at most `max_wait_s`, by default as long
        as a check may take) for a round to finish."""
        task = self.refresh_if_stale(providers)
        if task is not None:
            wait = self.timeout_s + 1 if max_wait_s is None else max_wait_s
            # `wait`, not `wait_for`: a caller that gives up must not cancel the round
            # others wait on, and a cancel of the caller's own must never be dropped.
            await asyncio.wait({task}, timeout=wait)
        return self._results

    async def started(self, providers: Mapping[str, Provider], first_wait_s: float) -> None:
        """Refresh in the background; only before the very first results, wait a little for
        them, so a page opened right after start does not say "checking" for a poll."""
        if self._checked_at:
            self.refresh_if_stale(providers)
        else:
            await self.fresh(providers, first_wait_s)

    async def _round(self, providers: dict[str, Provider]) -> None:
        names = list(providers)
        results = await asyncio.gather(*(self._check(providers[n]) for n in names))
        if asyncio.current_task() in self._outdated:
            return
        self._results = dict(zip(names, results, strict=True))
        self._checked_at = time.monotonic()

    async def _check(self, provider: Provider) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):
                health = await provider.health()
        except TimeoutError:
            return _failed(f"health check did not finish in {self.timeout_s:g}s", started)
        except Exception as exc:  # a provider's bug must not break the status page
            log.warning("health_check_failed", provider=provider.name, error=repr(exc))
            return _failed(f"health check failed: {type(exc).__name__}: {exc}", started)
        return {
            "ok": health.ok,
            # OLP's own words (binary paths, variable names): the owner needs them whole.
            "checks": list(health.checks),
            "fix": health.fix,
            "latency_ms": _ms(health.latency_ms, started),
            "checked_at": time.time(),
        }

    async def aclose(self) -> None:
        tasks = [t for t in (self._task, *self._outdated) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _failed(message: str, started: float) -> dict[str, Any]:
    return {
        "ok": False,
        "checks": [scrub(message)],
        "fix": None,
        "latency_ms": _ms(None, started),
        "checked_at": time.time(),
    }


def _ms(reported: float | None, started: float) -> float:
    value = reported if reported is not None else (time.perf_counter() - started) * 1000
    return round(value, 1)
