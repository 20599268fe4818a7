"""The trigger table of docs/design.md §5, in one place: what each failure code makes OLP do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from olp.errors import Failure

__all__ = ["RATE_OR_QUOTA", "SKIPS", "Decision", "decide"]


@dataclass(frozen=True, slots=True)
class Decision:
    # Try the next hop? (Only ever before the first content reached the client.)
    fallback: bool
    # What to cool down: that provider+model, the whole provider, or nothing.
    cooldown: Literal["model", "provider", "none"]


_TABLE: dict[Failure, Decision] = {
    Failure.RATE_LIMITED: Decision(fallback=True, cooldown="model"),
    Failure.QUOTA_EXHAUSTED: Decision(fallback=True, cooldown="provider"),
    Failure.OVERLOADED: Decision(fallback=True, cooldown="none"),
    Failure.UPSTREAM_ERROR: Decision(fallback=True, cooldown="none"),
    Failure.TRANSPORT: Decision(fallback=True, cooldown="none"),
    Failure.TIMEOUT: Decision(fallback=True, cooldown="none"),
    Failure.SPAWN_FAILED: Decision(fallback=True, cooldown="none"),
    Failure.CLI_NOT_FOUND: Decision(fallback=True, cooldown="none"),
    Failure.CONCURRENCY_LIMIT: Decision(fallback=True, cooldown="none"),
    Failure.SOFT_TRIGGER: Decision(fallback=True, cooldown="none"),
    # The key used its share of the provider's window; others may still use it.
    Failure.SHARE_SPENT: Decision(fallback=True, cooldown="none"),
    Failure.COOLDOWN: Decision(fallback=True, cooldown="none"),
    Failure.UNSUPPORTED: Decision(fallback=True, cooldown="none"),
    # The owner must fix credentials; hiding it behind the next hop would hide the problem.
    Failure.AUTH_FAILED: Decision(fallback=False, cooldown="none"),
    # The request itself is wrong: every hop would say so, and each would cost quota.
    Failure.INVALID_REQUEST: Decision(fallback=False, cooldown="none"),
}

# Skipped before any request was made.
SKIPS = frozenset(
    {Failure.SOFT_TRIGGER, Failure.SHARE_SPENT, Failure.COOLDOWN, Failure.UNSUPPORTED}
)
# Failures that make an exhausted chain a 429 rather than a 503 when they are all there was.
RATE_OR_QUOTA = frozenset(
    {
        Failure.RATE_LIMITED,
        Failure.QUOTA_EXHAUSTED,
        Failure.SOFT_TRIGGER,
        Failure.SHARE_SPENT,
        Failure.COOLDOWN,
    }
)


def decide(failure: Failure) -> Decision:
    return _TABLE[failure]
