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
_MINUTE_S = 60.0


@dataclass(slots=True)
class _Tally:
    """What one key (or everyone) sent a provider: answers with token counts, and without."""

    tokens: int = 0  # reported by the answers that reported counts
    counted: int = 0  # answers that reported token counts
    uncounted: int = 0  # answers that reported none

    @property
    def requests(self) -> int:
        return self.counted + self.uncounted

    def add(self, tokens: int | None) -> None:
        if tokens is None or tokens < 0:
            self.uncounted += 1
        else:
            self.tokens += tokens
            self.counted += 1

    def merge(self, other: _Tally) -> None:
        self.tokens += other.tokens
        self.counted += other.counted
        self.uncounted += other.uncounted

    def weight(self, average: float) -> float:
        """Its tokens, an answer without counts taken as `average`."""
        return self.tokens + average * self.uncounted


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
    ledger at start). Meant for the event loop's thread.

    Kept as one tally per key per minute, not a row per request: memory and the cost of a
    share check stay the same however many requests a window holds. A window's start is
    therefore known to the minute.
    """

    def __init__(self) -> None:
        # provider -> (minute, key id -> its tally in that minute), oldest first
        self._sent: dict[str, deque[tuple[int, dict[str, _Tally]]]] = {}

    def record(self, provider: str, key_id: str, tokens: int | None, at: float) -> None:
        sent = self._sent.setdefault(provider, deque())
        minute = int(at // _MINUTE_S)
        if not sent or sent[-1][0] < minute:
            sent.append((minute, {}))
        # (A clock that stepped back counts in the newest minute.)
        tally = sent[-1][1].get(key_id)
        if tally is None:
            tally = sent[-1][1][key_id] = _Tally()
        tally.add(tokens)
        _trim(sent, at)

    def seed(self, rows: Iterable[tuple[str, str, int | None, float]]) -> None:
        """(provider, key id, tokens, time) rows, oldest first (the ledger's last hours)."""
        for provider, key_id, tokens, at in rows:
            self.record(provider, key_id, tokens, at)

    def portion(self, provider: str, key_id: str, since: float, now: float) -> float:
        """The key's part (0..1) of what everyone sent `provider` since `since` (to the
        minute)."""
        sent = self._sent.get(provider)
        if not sent:
            return 0.0
        _trim(sent, now)
        first = int(since // _MINUTE_S)
        everyone, mine = _Tally(), _Tally()
        for minute, tallies in sent:
            if minute < first:
                continue
            for key, tally in tallies.items():
                everyone.merge(tally)
                if key == key_id:
                    mine.merge(tally)
        if not everyone.requests:
            return 0.0
        # An answer that reported no token counts weighs as much as an average one.
        average = everyone.tokens / everyone.counted if everyone.counted else 1.0
        total = everyone.weight(average)
        if total <= 0:  # every answer reported zero tokens: count requests instead
            return mine.requests / everyone.requests
        return mine.weight(average) / total

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


def _trim(sent: deque[tuple[int, dict[str, _Tally]]], now: float) -> None:
    """Drop the minutes wholly older than the window."""
    oldest = int((now - WINDOW_S) // _MINUTE_S)
    while sent and sent[0][0] < oldest:
        sent.popleft()
