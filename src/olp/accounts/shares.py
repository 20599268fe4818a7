"""A key's share of a provider's usage window: how much of the window each key used.

A provider tells OLP how full its current window is (Anthropic's unified 5-hour
utilisation, Codex's primary window, Claude Code's rate-limit events); it does not say
who used it. OLP attributes the window to keys by what each key sent the provider inside
it: a key's part of the window is its tokens (prompt + completion) to that provider since
the window began, over everyone's, times the provider's utilisation. A request whose
answer reported no token counts weighs as much as an average request of the window.

    kid sent 3,000 of the 10,000 tokens claude-me answered in this window,
    and claude-me reports its window 60 % used: kid has used 18 % of it.

With `olp keys set kid --share claude-me=0.25`, kid may use up to 25 % of claude-me's
window; past it, kid's requests step over claude-me like a soft trigger until the window
resets. The windows are the providers' 5-hour windows: OLP keeps five hours of use.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["WINDOW_S", "ShareUse", "WindowUse"]

WINDOW_S = 5 * 3600.0


@dataclass(frozen=True, slots=True)
class ShareUse:
    """How much of a provider's window a key used, against the share it may use."""

    provider: str
    share: float  # 0..1
    used: float  # 0..1 of the whole window
    reset_at: float

    @property
    def spent(self) -> bool:
        return self.used >= self.share

    def text(self, key_name: str) -> str:
        return f"{key_name}: {self.used:.0%} of {self.share:.0%} of {self.provider}'s window"


class WindowUse:
    """Who sent what to each provider in the last five hours (memory only; `seed` from the
    ledger at start). Meant for the event loop's thread."""

    def __init__(self) -> None:
        # provider -> (time, key id, tokens or None), oldest first
        self._sent: dict[str, deque[tuple[float, str, int | None]]] = {}

    def record(self, provider: str, key_id: str, tokens: int | None, at: float) -> None:
        sent = self._sent.setdefault(provider, deque())
        sent.append((at, key_id, tokens if tokens is None or tokens >= 0 else None))
        _trim(sent, at)

    def seed(self, rows: Iterable[tuple[str, str, int | None, float]]) -> None:
        """(provider, key id, tokens, time) rows, oldest first (the ledger's last hours)."""
        for provider, key_id, tokens, at in rows:
            self._sent.setdefault(provider, deque()).append((at, key_id, tokens))

    def portion(self, provider: str, key_id: str, since: float, now: float) -> float:
        """The key's part (0..1) of what everyone sent `provider` since `since`."""
        sent = self._sent.get(provider)
        if not sent:
            return 0.0
        _trim(sent, now)
        rows = [(key, tokens) for at, key, tokens in sent if at >= since]
        if not rows:
            return 0.0
        known = [tokens for _, tokens in rows if tokens is not None]
        average = sum(known) / len(known) if known else 1.0
        weights = [(key, average if tokens is None else tokens) for key, tokens in rows]
        total = sum(weight for _, weight in weights)
        if total <= 0:  # every answer reported zero tokens: count requests instead
            return sum(1 for key, _ in rows if key == key_id) / len(rows)
        return sum(weight for key, weight in weights if key == key_id) / total

    def use(
        self,
        provider: str,
        key_id: str,
        share: float,
        utilisation: float,
        reset_at: float,
        now: float,
    ) -> ShareUse:
        since = reset_at - WINDOW_S
        used = utilisation * self.portion(provider, key_id, since, now)
        return ShareUse(provider, share, used, reset_at)


def _trim(sent: deque[tuple[float, str, int | None]], now: float) -> None:
    oldest = now - WINDOW_S
    while sent and sent[0][0] < oldest:
        sent.popleft()
