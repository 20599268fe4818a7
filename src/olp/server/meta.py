"""The `X-OLP-*` headers every chat response carries, success or error (docs/design.md §4)."""

from __future__ import annotations

import json
import math
import random
import re
import time
from dataclasses import dataclass, field

from olp.accounts import Identity
from olp.config import AuthConfig
from olp.errors import ChainFailed, HopFailure, OLPError

__all__ = ["ResponseMeta", "fallback_detail", "header_value", "new_request_id"]

_DETAIL_LIMIT = 4096
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")


def new_request_id() -> str:
    # 72 random bits from the process's PRNG (seeded from the OS at start): unique enough
    # for an id, and unlike os.urandom no system call, which would hand the GIL away.
    return f"req_{random.getrandbits(72):018x}"


@dataclass(slots=True)
class ResponseMeta:
    request_id: str = field(default_factory=new_request_id)
    started: float = field(default_factory=time.perf_counter)
    wall_start: float = field(default_factory=time.time)
    identity: Identity | None = None
    provider: str = "none"
    model: str = "unknown"
    hops: int = 0
    cache: str = "bypass"
    failures: tuple[HopFailure, ...] = ()
    exhausted: tuple[str, ...] = ()

    def latency_ms(self) -> int:
        return int((time.perf_counter() - self.started) * 1000)

    def note_failure(self, err: OLPError) -> None:
        if isinstance(err, ChainFailed):
            self.failures = err.failures
            if err.exhausted:
                # No provider answered; "hops" becomes how many the chain went through.
                self.provider = self.model = "none"
                self.hops = len(err.failures)
                self.exhausted = tuple(f.provider for f in err.failures)
            else:
                last = err.failures[-1]
                self.provider, self.model, self.hops = last.provider, last.model, last.hop

    def headers(self, auth: AuthConfig, err: OLPError | None = None) -> list[tuple[bytes, bytes]]:
        values = [
            (b"x-olp-request-id", self.request_id),
            (b"x-request-id", self.request_id),  # what the OpenAI SDKs read
            (b"x-olp-provider-used", self.provider),
            (b"x-olp-model-used", self.model),
            (b"x-olp-fallback-hops", str(self.hops)),
            (b"x-olp-cache", self.cache),
            (b"x-olp-latency-ms", str(self.latency_ms())),
        ]
        if self.exhausted:
            values.append((b"x-olp-fallback-exhausted", ",".join(self.exhausted)))
        if self.failures and self._may_see_detail(auth):
            values.append((b"x-olp-fallback-detail", fallback_detail(self.failures)))
        if err is not None and err.retry_after is not None:
            values.append((b"retry-after", str(max(1, math.ceil(err.retry_after)))))
        return [(name, header_value(value)) for name, value in values]

    def _may_see_detail(self, auth: AuthConfig) -> bool:
        policy = auth.fallback_detail_header_policy
        if policy == "all":
            return True
        return policy == "owner_only" and self.identity is not None and self.identity.is_owner


def fallback_detail(failures: tuple[HopFailure, ...]) -> str:
    """JSON list of failed hops, ASCII-only and at most 4 KB (tail dropped, with a marker)."""
    items = [
        {
            "hop": f.hop,
            "provider": f.provider,
            "model": f.model,
            "code": f.error.failure.value,
            "message": f.error.message[:200],
            "trigger": f.trigger,
        }
        for f in failures
    ]
    for kept in range(len(items), -1, -1):
        shown = items[:kept]
        if kept < len(items):
            shown = [*shown, {"truncated": True, "omitted_hops": len(items) - kept}]
        # ensure_ascii escapes non-ASCII and control characters: header_value keeps it as is.
        text = json.dumps(shown, ensure_ascii=True, separators=(",", ":"))
        if len(text) <= _DETAIL_LIMIT:
            return text
    return "[]"


def header_value(value: str) -> bytes:
    """`value` as a valid HTTP header value: printable ASCII, everything else escaped.

    Every header built from request or upstream data goes through here: a raw control
    character would make the server drop the response, and CR/LF would forge headers.
    """
    if value.isascii() and value.isprintable():  # (nearly always: nothing to escape)
        return value.encode()
    raw = value.encode("ascii", "backslashreplace")
    return _CONTROL.sub(lambda m: b"\\x%02x" % m[0][0], raw)
