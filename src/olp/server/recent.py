"""The last errors and fallback events, for the status endpoint and the dashboard.

Two rings of the last 50 requests each. Recording keeps a reference to the request's
outcome (O(1), nothing formatted); messages are cut and scrubbed only when read, so the
hot path never runs a regular expression.

Never recorded: 401 and 403 answers. Anyone can send bad keys; letting them into the ring
would let a brute-force attempt push every real error out of the owner's view.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

from olp.errors import HopFailure
from olp.server.outcome import RequestOutcome

__all__ = ["RING_SIZE", "RecentEvents", "scrub"]

RING_SIZE = 50
_MESSAGE_CHARS = 200
_NOT_RECORDED = frozenset({401, 403})
# A filesystem path: two or more segments after a root, a drive, `~` or `.`/`..`.
_PATH = re.compile(
    r"(?<![\w.~])(?:[A-Za-z]:|~|\.{1,2})?(?![\\/]v\d+[\\/])"  # not an API route (/v1/...)
    r"(?:[\\/][^\s\\/'\"`,;:()\[\]{}<>]+){2,}[\\/]?"
)
# Secrets that a message could quote: OLP keys and the common API-key shapes.
_SECRET = re.compile(r"\b(?:olp_[A-Za-z0-9_-]{16,}|sk-[A-Za-z0-9_-]{16,}|AIza[0-9A-Za-z_-]{30,})")


def scrub(message: str | None) -> str | None:
    """At most 200 characters, filesystem paths replaced by "[path]", keys by "[secret]".

    A URL is kept whole: its path is not a file on this machine.
    """
    if message is None:
        return None
    words = []
    for word in message[: _MESSAGE_CHARS * 10].split(" "):  # bounded work for huge messages
        if "://" not in word:
            word = _PATH.sub("[path]", word)
        words.append(_SECRET.sub("[secret]", word))
    text = " ".join(words)
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 1] + "…"


class RecentEvents:
    __slots__ = ("errors", "fallbacks")

    def __init__(self) -> None:
        self.errors: deque[tuple[float, RequestOutcome]] = deque(maxlen=RING_SIZE)
        self.fallbacks: deque[tuple[float, RequestOutcome]] = deque(maxlen=RING_SIZE)

    def add(self, now: float, outcome: RequestOutcome) -> None:
        if outcome.status >= 400 and outcome.status not in _NOT_RECORDED:
            self.errors.append((now, outcome))
        if outcome.failures:
            self.fallbacks.append((now, outcome))

    def errors_json(self) -> list[dict[str, Any]]:
        """Newest first."""
        return [
            {
                "time": ts,
                "request_id": o.request_id,
                "status": o.status,
                "code": o.error_code,
                "message": scrub(o.error_message),
                "provider": None if o.provider == "none" else o.provider,
                "model": o.requested_model,
                "key_name": o.identity.name if o.identity is not None else None,
            }
            for ts, o in reversed(self.errors)
        ]

    def fallbacks_json(self) -> list[dict[str, Any]]:
        """Newest first: the chain asked for, each hop that did not answer and why."""
        return [
            {
                "time": ts,
                "request_id": o.request_id,
                "chain": o.requested_model,
                "served_by": o.provider if o.status < 400 else None,
                "status": o.status,
                "hops": [_hop(f) for f in o.failures],
            }
            for ts, o in reversed(self.fallbacks)
        ]


def _hop(f: HopFailure) -> dict[str, Any]:
    return {
        "hop": f.hop,
        "provider": f.provider,
        "model": f.model,
        "code": f.error.failure.value,
        "trigger": f.trigger,
        "message": scrub(f.error.message),
    }
