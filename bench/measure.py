"""One round of load against one target, with what it cost each process; rounds -> Cell."""

from __future__ import annotations

import contextlib
import math
import os
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import procs
from bench.cells import Cell
from bench.loadgen import LoadResult
from bench.payloads import TOKEN

_REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Workload:
    """What the generator sends: where, with which key, and whether every body differs."""

    url: str
    token: str = TOKEN
    distinct: int = 0  # size of the ring of distinct bodies; 0 = the same body every time
    seed_base: int = 0  # first seed of the ring (each run of the generator gets its own)


@dataclass(frozen=True, slots=True)
class Round:
    load: LoadResult
    cpu_s: dict[str, float]  # server name -> CPU seconds used during the round
    rss_mib: dict[str, float]  # server name -> resident memory after the round
    other_cpu_s: float  # CPU the machine spent outside this run during the round
    wall_s: float


def run_loadgen(
    work: Workload, stream: bool, conns: int, warmup: float, duration: float, gen_procs: int
) -> LoadResult:
    argv = [sys.executable, "-m", "bench.loadgen", "--url", work.url, "--conns", str(conns)]
    argv += ["--duration", str(duration), "--warmup", str(warmup), "--procs", str(gen_procs)]
    argv += ["--token", work.token]
    argv += ["--stream"] if stream else []
    if work.distinct:
        argv += ["--distinct", str(work.distinct), "--seed-base", str(work.seed_base)]
    # Its own session, so a failure here can kill the generator and any shard it spawned.
    proc = subprocess.Popen(
        argv, cwd=_REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=warmup + duration + 60)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):  # it may have just finished
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"load generator failed ({proc.returncode}): {err.decode()[-2000:]}")
    raw: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    # orjson writes NaN as null; the report expects NaN for "not measured".
    fields: dict[str, Any] = {k: math.nan if v is None else v for k, v in raw.items()}
    return LoadResult(**fields)


def measure_round(
    work: Workload,
    stream: bool,
    conns: int,
    warmup: float,
    duration: float,
    gen_procs: int,
    servers: list[procs.Server],
    involved: list[procs.Server],
) -> Round:
    cpu0 = {s.name: s.cpu_s() for s in servers}
    ours0 = _own_cpu_s()
    busy0, wall0 = procs.machine_busy_s(), time.monotonic()
    load = run_loadgen(work, stream, conns, warmup, duration, gen_procs)
    busy, wall = procs.machine_busy_s() - busy0, time.monotonic() - wall0
    cpu = {s.name: s.cpu_s() - cpu0[s.name] for s in servers}
    # What the machine did beyond this run (other tenants, VM steal) competed with the
    # servers under test; the report flags cells where it was large.
    other = busy - sum(cpu.values()) - (_own_cpu_s() - ours0)
    return Round(
        load=load,
        cpu_s={s.name: cpu[s.name] for s in involved},
        rss_mib={s.name: s.rss_mib() for s in involved},
        other_cpu_s=max(other, 0.0),
        wall_s=wall,
    )


def _own_cpu_s() -> float:
    """CPU of this runner and its finished children (the load generators run so far)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def to_cell(
    target: str,
    proxy: str | None,
    stream: bool,
    conns: int,
    rounds: list[Round],
    blocks: tuple[int, ...] = (),
) -> Cell:
    done = max(sum(r.load.total_requests for r in rounds), 1)
    names = rounds[0].cpu_s.keys()
    wall = sum(r.wall_s for r in rounds) * (os.cpu_count() or 1)
    return Cell(
        target=target,
        proxy=proxy,
        stream=stream,
        conns=conns,
        rounds=tuple(r.load for r in rounds),
        cpu_us_per_req={n: sum(r.cpu_s[n] for r in rounds) / done * 1e6 for n in names},
        rss_mib={n: max(r.rss_mib[n] for r in rounds) for n in names},
        other_load=sum(r.other_cpu_s for r in rounds) / wall,
        blocks=blocks,
    )
