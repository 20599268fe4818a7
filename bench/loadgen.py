"""A bounded closed-loop HTTP/1.1 load generator, cheap enough not to be the bottleneck.

C persistent connections each send pre-built request bytes, wait for the whole response,
and send again, for a warm-up and then a measured window, under a hard cap on the number of
requests. By default every request is the same; with `--distinct N` the generator builds a
ring of N requests that differ in `seed` (part of OLP's cache key) before the clock starts,
sends each at most once, and stops (`capped`) rather than repeat one.

No HTTP client library: asyncio protocols on uvloop and a framing-only parser (bench.http1)
cost a few tens of microseconds per request, where an aiohttp client costs 100+; on two
shared cores that difference is throughput taken from the server.

    python -m bench.loadgen --url http://127.0.0.1:9100/v1/chat/completions \
        --conns 64 --duration 5 --warmup 1 [--stream] [--procs 2] \
        [--token T] [--distinct 32768 --seed-base 0]

Prints one JSON object (see LoadResult) on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.synchronize import Barrier
from typing import Any, cast
from urllib.parse import urlsplit

import orjson
import uvloop

from bench.http1 import ProtocolError, ResponseParser
from bench.payloads import TOKEN, request_body

# A frame with text: `"content":"` followed by anything but the closing quote, so the role
# chunk (`"content":""` or none at all) does not count as the first token.
_CONTENT = re.compile(rb'"content":\s*"[^"]')
_TAIL = 64  # bytes of the previous read searched again, for a pattern split across reads
_GRACE_S = 10.0  # after the window, how long in-flight requests may take to finish


@dataclass(frozen=True, slots=True)
class Plan:
    host: str
    port: int
    requests: tuple[bytes, ...]  # sent in turn; one for the same request every time
    stream: bool
    conns: int
    warmup_s: float
    duration_s: float
    max_requests: int


@dataclass(slots=True)
class ShardResult:
    latencies: list[float] = field(default_factory=list)  # seconds, measured window only
    ttfbs: list[float] = field(default_factory=list)
    total: int = 0  # every completed response, warm-up included (for CPU per request)
    non_2xx: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    window_s: float = 0.0
    cpu_s: float = 0.0  # this process's CPU time over the whole run
    capped: bool = False


class _Shard:
    """The state the connections of one process share: clock, cap, and what was recorded."""

    def __init__(self, plan: Plan, cap: int) -> None:
        self.plan = plan
        self.requests = plan.requests
        self.ring = len(plan.requests)
        self.cap = cap
        self.sent = 0
        self.result = ShardResult()
        self.t_measure = math.inf
        self.t_stop = math.inf
        self.last_done = 0.0
        self.active = 0
        self.all_idle: asyncio.Future[None] | None = None

    def may_send(self, now: float) -> bool:
        if now >= self.t_stop:
            return False
        if self.sent >= self.cap:
            self.result.capped = True
            return False
        self.sent += 1
        return True

    def record(self, latency: float, ttfb: float, status: int, now: float) -> None:
        res = self.result
        res.total += 1
        if not 200 <= status < 300:
            res.non_2xx += 1  # warm-up included: any failure makes the run invalid
        if self.t_measure <= now <= self.t_stop:
            res.latencies.append(latency)
            res.ttfbs.append(ttfb)
            self.last_done = now

    def error(self, reason: str) -> None:
        self.result.errors[reason] = self.result.errors.get(reason, 0) + 1

    def idle(self) -> None:
        self.active -= 1
        if self.active == 0 and self.all_idle is not None and not self.all_idle.done():
            self.all_idle.set_result(None)


class _Conn(asyncio.Protocol):
    """One keep-alive connection running requests back to back."""

    def __init__(self, shard: _Shard) -> None:
        self.shard = shard
        self.stream = shard.plan.stream
        self.parser = ResponseParser()
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.t_start = 0.0
        self.ttfb = 0.0
        self.prev = b""  # the previous read of this response (streams only)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def start(self) -> None:
        self._next(time.perf_counter())

    def _next(self, now: float) -> None:
        if self.transport is None or not self.shard.may_send(now):
            if self.transport is None:
                self.shard.error("connection closed")
            self.busy = False
            self.shard.idle()
            return
        self.busy = True
        self.parser.reset()
        self.ttfb = 0.0
        self.prev = b""
        shard = self.shard
        request = shard.requests[(shard.sent - 1) % shard.ring]  # sent counts this one
        self.t_start = time.perf_counter()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        # Hot path: runs once per socket read, so it allocates as little as it can.
        if not self.busy:
            self._fail("bytes while idle")
            return
        stream = self.stream
        if self.ttfb == 0.0 and (not stream or _CONTENT.search(self.prev[-_TAIL:] + data)):
            self.ttfb = time.perf_counter() - self.t_start
        try:
            done = self.parser.feed(data)
        except ProtocolError as exc:
            self._fail(str(exc))
            return
        if not done:
            if stream:
                self.prev = data  # kept for a pattern split across two reads
            return
        now = time.perf_counter()
        if stream and not self._stream_ok(self.prev[-_TAIL:] + data[-_TAIL:]):
            return
        self.shard.record(now - self.t_start, self.ttfb, self.parser.status, now)
        self._next(now)

    def _stream_ok(self, end: bytes) -> bool:
        # A 2xx stream must carry text and end with [DONE]; an error body is counted as
        # non-2xx by record(), not here.
        if not 200 <= self.parser.status < 300:
            self.ttfb = self.ttfb or time.perf_counter() - self.t_start
            return True
        if self.ttfb == 0.0:
            self._fail("stream without a content frame")
            return False
        if b"data: [DONE]" not in end:
            self._fail("stream without data: [DONE]")
            return False
        return True

    def _fail(self, reason: str) -> None:
        self.shard.error(reason)
        self._close()

    def _close(self) -> None:
        transport, self.transport = self.transport, None
        if transport is not None:
            transport.abort()
        if self.busy:
            self.busy = False
            self.shard.idle()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.transport = None
            if self.busy:
                self.shard.error("connection lost mid-response")
                self.busy = False
                self.shard.idle()


async def _run_shard(plan: Plan, conns: int, cap: int, barrier: Barrier | None) -> ShardResult:
    loop = asyncio.get_running_loop()
    shard = _Shard(plan, cap)
    protocols: list[_Conn] = []
    for _ in range(conns):
        _, proto = await loop.create_connection(lambda: _Conn(shard), plan.host, plan.port)
        protocols.append(proto)
    if barrier is not None:
        # Every process connects first, then all start together; blocking here is fine
        # because no request is in flight yet.
        barrier.wait(timeout=30)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    shard.t_measure = t0 + plan.warmup_s
    shard.t_stop = shard.t_measure + plan.duration_s
    shard.all_idle = loop.create_future()
    shard.active = len(protocols)  # before any start(), which may go idle at once
    for proto in protocols:
        proto.start()
    deadline = shard.t_stop + _GRACE_S - time.perf_counter()
    try:
        await asyncio.wait_for(asyncio.shield(shard.all_idle), timeout=max(deadline, 0.1))
    except TimeoutError:
        for proto in protocols:
            if proto.busy:
                shard.error("timeout")
                proto._close()
    for proto in protocols:
        proto._close()
    res = shard.result
    res.cpu_s = time.process_time() - cpu0
    # A capped run ends early: its window is as long as requests kept completing.
    end = min(shard.t_stop, shard.last_done) if res.capped else shard.t_stop
    res.window_s = max(end - shard.t_measure, 1e-9)
    return res


def _shard_main(plan: Plan, conns: int, cap: int, barrier: Barrier | None) -> ShardResult:
    return uvloop.run(_run_shard(plan, conns, cap, barrier))


def _shard_process(
    plan: Plan, conns: int, cap: int, barrier: Barrier, out: multiprocessing.Queue[Any]
) -> None:
    try:
        out.put(("ok", _shard_main(plan, conns, cap, barrier)))
    except BaseException as exc:
        barrier.abort()
        out.put(("error", f"{type(exc).__name__}: {exc}"))


def run(plan: Plan, procs: int) -> list[ShardResult]:
    """Run the plan in `procs` processes (1 = this one), splitting connections and cap.

    Distinct requests are dealt out to the shards, so no two processes send the same one.
    """
    procs = max(1, min(procs, plan.conns))
    conns = [plan.conns // procs + (i < plan.conns % procs) for i in range(procs)]
    caps = [max(1, plan.max_requests * c // plan.conns) for c in conns]
    plans = [plan] * procs
    if len(plan.requests) > 1:
        plans = [replace(plan, requests=plan.requests[i::procs]) for i in range(procs)]
        caps = [min(cap, len(p.requests)) for cap, p in zip(caps, plans, strict=True)]
    if procs == 1:
        return [_shard_main(plan, conns[0], caps[0], None)]
    # spawn, not fork: each shard gets a clean interpreter and its own uvloop.
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(procs)
    out: multiprocessing.Queue[Any] = ctx.Queue()
    workers = [
        ctx.Process(target=_shard_process, args=(p, n, cap, barrier, out), daemon=True)
        for p, n, cap in zip(plans, conns, caps, strict=True)
    ]
    for w in workers:
        w.start()
    results: list[ShardResult] = []
    try:
        timeout = plan.warmup_s + plan.duration_s + _GRACE_S + 30
        for _ in workers:
            status, value = out.get(timeout=timeout)
            if status != "ok":
                raise RuntimeError(f"load generator shard failed: {value}")
            results.append(value)
    finally:
        for w in workers:
            w.join(timeout=5)
            if w.is_alive():
                w.kill()
    return results


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one load run measured; JSON on stdout."""

    conns: int
    procs: int
    stream: bool
    requests: int  # completed inside the measured window
    total_requests: int  # completed in all, warm-up included
    window_s: float
    rps: float
    p50_ms: float
    p99_ms: float
    ttfb_p50_ms: float
    non_2xx: int  # over the whole run, warm-up included
    errors: dict[str, int]
    capped: bool
    loadgen_cpu_us_per_req: float


def _percentile(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize(plan: Plan, shards: list[ShardResult]) -> LoadResult:
    latencies = sorted(x for s in shards for x in s.latencies)
    ttfbs = sorted(x for s in shards for x in s.ttfbs)
    errors: dict[str, int] = {}
    for s in shards:
        for reason, n in s.errors.items():
            errors[reason] = errors.get(reason, 0) + n
    window = max(s.window_s for s in shards)
    total = sum(s.total for s in shards)
    cpu = sum(s.cpu_s for s in shards)
    return LoadResult(
        conns=plan.conns,
        procs=len(shards),
        stream=plan.stream,
        requests=len(latencies),
        total_requests=total,
        window_s=round(window, 3),
        rps=round(len(latencies) / window, 1),
        p50_ms=round(_percentile(latencies, 50) * 1e3, 3),
        p99_ms=round(_percentile(latencies, 99) * 1e3, 3),
        ttfb_p50_ms=round(_percentile(ttfbs, 50) * 1e3, 3),
        non_2xx=sum(s.non_2xx for s in shards),
        errors=errors,
        capped=any(s.capped for s in shards),
        loadgen_cpu_us_per_req=round(cpu / total * 1e6, 1) if total else math.nan,
    )


def build_requests(
    url: str, bodies: Iterable[bytes], token: str
) -> tuple[str, int, tuple[bytes, ...]]:
    """The request bytes, built once before the clock starts and written as-is."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or not parts.port:
        raise SystemExit(f"--url must be http://HOST:PORT/PATH, got {url!r}")
    head = (
        f"POST {parts.path or '/'} HTTP/1.1\r\n"
        f"Host: {parts.hostname}:{parts.port}\r\n"
        f"Authorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\n"
        "Accept: */*\r\n"
        "Content-Length: "
    ).encode()
    requests = tuple(head + b"%d\r\n\r\n" % len(body) + body for body in bodies)
    return parts.hostname, parts.port, requests


def request_bodies(stream: bool, distinct: int, seed_base: int) -> list[bytes]:
    """One body, or `distinct` bodies with consecutive seeds from `seed_base`."""
    if distinct <= 0:
        return [request_body(stream)]
    return [request_body(stream, seed) for seed in range(seed_base, seed_base + distinct)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__)
    parser.add_argument("--url", required=True, help="http://127.0.0.1:PORT/v1/chat/completions")
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first")
    parser.add_argument("--max-requests", type=int, default=250_000, help="hard cap")
    parser.add_argument("--procs", type=int, default=1, help="generator processes")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--token", default=TOKEN, help="the bearer token every request sends")
    parser.add_argument(
        "--distinct",
        type=int,
        default=0,
        metavar="N",
        help="send N different requests (seeds --seed-base …), each at most once",
    )
    parser.add_argument("--seed-base", type=int, default=0, help="first seed for --distinct")
    args = parser.parse_args(argv)
    bodies = request_bodies(args.stream, args.distinct, args.seed_base)
    host, port, requests = build_requests(args.url, bodies, args.token)
    # With distinct bodies the cap is the ring: a request is never sent twice.
    cap = min(args.max_requests, len(requests)) if args.distinct > 0 else args.max_requests
    plan = Plan(
        host=host,
        port=port,
        requests=requests,
        stream=args.stream,
        conns=args.conns,
        warmup_s=args.warmup,
        duration_s=args.duration,
        max_requests=cap,
    )
    result = summarize(plan, run(plan, args.procs))
    sys.stdout.write(orjson.dumps(asdict(result)).decode() + "\n")


if __name__ == "__main__":
    main()
