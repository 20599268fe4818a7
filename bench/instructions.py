"""Instructions per request, per thread, counted by callgrind: the cost lines without the noise.

    python -m bench.instructions [--seconds 20] [--mode json|stream|both] [--out FILE]

On a shared 2-core machine one round of throughput can run 15 % faster or slower than the
next, and the benchmark's cost lines (issue 5's cache miss, issue 4's member key and
ledger) then need dozens of paired rounds to say anything. The number of instructions a
request costs does not swing. For each cost line this runs the row and its baseline, one
after the other, as `olp start` under valgrind's callgrind (`--separate-threads=yes`),
drives each with `bench.loadgen` exactly as the throughput run does (same variants, same
bodies, distinct where the row is), and counts what every thread executed:

1. a warm-up load (1.5x the measured window: at callgrind's pace, enough for the miss
   row's namespace to reach its entry limit, so that its misses evict as at full speed),
   then the counters are zeroed;
2. the measured load, then a dump: instructions while serving `n` requests;
3. an idle window as long, then a dump: what timers and pollers cost meanwhile. Under
   callgrind OLP runs ~50x slower, so those would weigh on 50x fewer requests than at full
   speed; they are subtracted.

Per thread, (loaded − idle) / n is the instruction cost of one request. The main thread is
the event loop, where every request is served and whose time bounds throughput; the others
are the ledger's and the cache's writer threads.

What it does not see: instructions are not time. Memory stalls, GIL hand-offs and the kernel
cost time without instructions (a reference cycle per request once cost 9 % of the CPU and
hardly any instructions). And the writer threads, batching per time window, see batches ~50x
smaller than at full speed, so their fixed cost per batch (a COMMIT) weighs more: their
figures are upper bounds. Use it to find and compare costs; the throughput run's verdicts
stand.

Needs valgrind (`apt install valgrind`); takes ~2 minutes per row and mode.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench import procs
from bench.issue_lines import MEMBER, MEMBER_BASE, MISS, MISS_BASE
from bench.measure import Workload, run_loadgen
from bench.payloads import CHAT_PATH, TOKEN
from bench.run import OLP, ROWS, VARIANTS
from bench.targets import Variant, member_key

# (row, baseline) per cost line, as the throughput run's report names them.
LINES = (
    ("cache miss vs cache off, distinct requests (issue 5)", MISS, MISS_BASE),
    ("member key + ledger vs owner token, ledger off (issue 4)", MEMBER, MEMBER_BASE),
)
MAIN_THREAD = 1
_START_TIMEOUT_S = 300.0  # Python starts slowly under valgrind
_TOTALS = re.compile(rb"^(?:summary|totals):\s+(\d+)", re.MULTILINE)
_THREAD = re.compile(rb"^thread:\s+(\d+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Count:
    """One row in one mode: requests served, and instructions per request per thread."""

    row: str
    stream: bool
    requests: int
    per_thread: Mapping[int, float]

    @property
    def main(self) -> float:
        return self.per_thread.get(MAIN_THREAD, 0.0)

    @property
    def others(self) -> float:
        return sum(v for t, v in self.per_thread.items() if t != MAIN_THREAD)

    @property
    def total(self) -> float:
        return self.main + self.others


def read_dump(files: list[Path]) -> dict[int, int]:
    """Instructions per thread from one callgrind dump (one file per thread)."""
    counts: dict[int, int] = {}
    for path in files:
        text = path.read_bytes()
        thread, totals = _THREAD.search(text), _TOTALS.search(text)
        if thread is None or totals is None:
            raise ValueError(f"{path} is not a callgrind dump with a thread and a total")
        counts[int(thread.group(1))] = int(totals.group(1))
    return counts


def per_request(
    loaded: Mapping[int, int], idle: Mapping[int, int], requests: int
) -> dict[int, float]:
    """(loaded − idle) / requests per thread; threads idle throughout are left out."""
    if requests <= 0:
        raise ValueError("no request was served in the measured window")
    out = {}
    for thread, count in loaded.items():
        cost = max(count - idle.get(thread, 0), 0) / requests
        if cost >= 1:
            out[thread] = cost
    return out


def _dump_files(workdir: Path, pid: int, dump: int) -> list[Path]:
    return sorted(workdir.glob(f"cg.{pid}.{dump}-*"))


def _control(flag: str, pid: int) -> None:
    subprocess.run(["callgrind_control", flag, str(pid)], check=True, capture_output=True)


def count_row(
    variant: Variant,
    distinct: bool,
    stream: bool,
    upstream_port: int,
    workdir: Path,
    seconds: float,
) -> Count:
    """Run `variant` under callgrind and count one request's instructions per thread."""
    home = workdir / f"{variant.name}-{'stream' if stream else 'json'}"
    home.mkdir()
    (home / "config.json").write_bytes(orjson.dumps(variant.config(upstream_port)))
    token = TOKEN if variant.member_limits is None else member_key(home, variant.member_limits)
    port = procs.free_port()
    valgrind = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--dump-instr=no"]
    valgrind.append(f"--callgrind-out-file={home}/cg.%p")
    server = procs.start(variant.name, valgrind + OLP.argv(port), home, OLP.env(home))
    try:
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            return procs.http("GET", base + "/health", None, {})[0] == 200

        procs.wait_ready(server, ready, timeout_s=_START_TIMEOUT_S)
        work = Workload(base + CHAT_PATH, token, 32_768 if distinct else 0, 0)
        # Long enough, at callgrind's pace, for olp-miss to fill its namespace to the entry
        # limit: from then on each miss also evicts, as it does at full speed.
        run_loadgen(work, stream, 8, 1.0, seconds * 1.5, 1)
        _control("-z", server.pid)
        measured = Workload(work.url, token, work.distinct, 1_000_000)
        load = run_loadgen(measured, stream, 8, 0.0, seconds, 1)
        _control("-d", server.pid)
        _control("-z", server.pid)
        time.sleep(seconds)
        _control("-d", server.pid)
        loaded = read_dump(_dump_files(home, server.pid, 1))
        idle = read_dump(_dump_files(home, server.pid, 2))
    finally:
        procs.stop(server, grace_s=60)
    return Count(
        variant.name, stream, load.total_requests, per_request(loaded, idle, load.total_requests)
    )


def render(counts: list[Count]) -> str:
    """The markdown table: each cost line's baseline, then its row with the cost."""
    by = {(c.row, c.stream): c for c in counts}
    lines = [
        "| cost line | mode | row | requests | main thread | other threads | total "
        "| cost (main) | cost (total) |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for title, row, base in LINES:
        for stream in (False, True):
            measured, baseline = by.get((row, stream)), by.get((base, stream))
            if measured is None or baseline is None:
                continue
            mode = "streaming" if stream else "non-streaming"
            main = f"{measured.main / baseline.main - 1:+.1%}"
            total = f"{measured.total / baseline.total - 1:+.1%}"
            lines.append(f"| {title} | {mode} | {_cells(baseline)} | | |")
            lines.append(f"| {title} | {mode} | {_cells(measured)} | {main} | {total} |")
    lines.append("")
    lines.append(
        "Instructions per request (callgrind, idle windows subtracted). Main thread: the "
        "event loop; other threads: the ledger's and the cache's writers, whose figures "
        "are upper bounds (see bench/instructions.py)."
    )
    return "\n".join(lines) + "\n"


def _header(seconds: float) -> str:
    valgrind = subprocess.run(["valgrind", "--version"], capture_output=True, text=True)
    return (
        "# OLP: instructions per request\n\n"
        "Generated by `python -m bench.instructions` (see bench/README.md) on "
        f"{datetime.date.today().isoformat()}: Python {platform.python_version()}, "
        f"{valgrind.stdout.strip()}, {seconds:g} s measured and {seconds:g} s idle per row, "
        "8 connections.\n\n"
    )


def _cells(c: Count) -> str:
    return f"{c.row} | {c.requests:,} | {c.main:,.0f} | {c.others:,.0f} | {c.total:,.0f}"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def count_all(modes: tuple[bool, ...], workdir: Path, seconds: float) -> list[Count]:
    """Every cost line's baseline and row, in each mode, against one fake upstream."""
    variants = {v.name: v for v in VARIANTS}
    distinct = {r.endpoint: r.distinct for r in ROWS}
    port = procs.free_port()
    argv = [sys.executable, "-m", "bench.fake_upstream", "--port", str(port)]
    upstream = procs.start("upstream", argv, workdir)
    counts: list[Count] = []
    try:
        models = f"http://127.0.0.1:{port}/v1/models"
        procs.wait_ready(upstream, lambda: procs.http("GET", models, None, {})[0] == 200)
        for _, row, base in LINES:
            for stream in modes:
                for name in (base, row):
                    _say(f"counting {name}, {'streaming' if stream else 'non-streaming'} …")
                    c = count_row(variants[name], distinct[name], stream, port, workdir, seconds)
                    _say(f"  {c.requests:,} requests; per request: main {c.main:,.0f}, "
                         f"others {c.others:,.0f} instructions")  # fmt: skip
                    counts.append(c)
    finally:
        procs.stop(upstream)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.instructions",
        description="Instructions per request, per thread, of each cost line's row and "
        "baseline, counted by callgrind.",
    )
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="measured (and idle) window per row"
    )
    parser.add_argument("--mode", choices=("json", "stream", "both"), default="both")
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        _say("bench.instructions needs valgrind and callgrind_control (apt install valgrind)")
        return 2
    modes = {"json": (False,), "stream": (True,), "both": (False, True)}[args.mode]
    with tempfile.TemporaryDirectory(prefix="olp-instructions-") as tmp:
        counts = count_all(modes, Path(tmp), args.seconds)
    report = _header(args.seconds) + render(counts)
    print(report)
    if args.out is not None:
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
