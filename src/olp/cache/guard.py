"""The leader's disconnect watch, as a flight sees it.

The server's `DisconnectWatch` implements it; `olp.cache.flight` uses it so that a
leader's client going away cuts the shared upstream only when nobody else listens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["CancelGuard"]


class CancelGuard(Protocol):
    """Whoever cancels the leader's task when its client goes away (the disconnect watch).

    While held, a cancel first asks `may_cancel()`: True cancels at once; False defers
    the cancel to `release()`, once the pull in progress has ended.
    """

    @property
    def task(self) -> asyncio.Task[Any] | None:
        """The leader's task (shutdown cancels it if it is reading the upstream)."""

    def hold(self, may_cancel: Callable[[], bool]) -> None: ...

    def release(self) -> None: ...
