"""The `X-OLP-*` headers every chat response carries, success or error (DESIGN §4)."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field

from olp.accounts import Identity
from olp.config import AuthConfig
from olp.errors import ChainFailed, HopFailure, OLPError

__all__ = ["ResponseMeta", "fallback_detail", "new_request_id"]

_DETAIL_LIMIT = 4096


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
                first = err.failures[0]
                self.provider, self.model = first.provider, first.model
                self.hops = len(err.failures)
                self.exhausted = tuple(f.provider for f in err.failures)
            else:
                last = err.failures[-1]
                self.provider, self.model, self.hops = last.provider, last.model, last.hop

    def headers(self, auth: AuthConfig, err: OLPError | None = None) -> list[tuple[bytes, bytes]]:
        headers = [
            (b"x-olp-request-id", self.request_id.encode()),
            (b"x-olp-provider-used", self.provider.encode()),
            (b"x-olp-model-used", _ascii(self.model)),
            (b"x-olp-fallback-hops", str(self.hops).encode()),
            (b"x-olp-cache", self.cache.encode()),
            (b"x-olp-latency-ms", str(self.latency_ms()).encode()),
        ]
        if self.exhausted:
            headers.append((b"x-olp-fallback-exhausted", ",".join(self.exhausted).encode()))
        if self.failures and self._may_see_detail(auth):
            headers.append((b"x-olp-fallback-detail", fallback_detail(self.failures)))
        if err is not None and err.retry_after is not None:
            headers.append((b"retry-after", str(max(1, math.ceil(err.retry_after))).encode()))
        return headers

    def _may_see_detail(self, auth: AuthConfig) -> bool:
        policy = auth.fallback_detail_header_policy
        if policy == "all":
            return True
        return policy == "owner_only" and self.identity is not None and self.identity.is_owner


def fallback_detail(failures: tuple[HopFailure, ...]) -> bytes:
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
        # ensure_ascii escapes non-ASCII (and \r\n become \\r\\n): safe as a header value.
        text = json.dumps(shown, ensure_ascii=True, separators=(",", ":"))
        if len(text) <= _DETAIL_LIMIT:
            return text.encode("ascii")
    return b"[]"


def _ascii(value: str) -> bytes:
    raw = value.encode("ascii", "backslashreplace")
    return raw.replace(b"\r", b"\\r").replace(b"\n", b"\\n")
