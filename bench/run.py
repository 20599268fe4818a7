"""Run the whole benchmark: upstream direct, passthrough and OLP, side by side in one run.

    python -m bench.run [--quick] [--duration S] [--rounds N] [--out docs/performance.md]

Starts the fake upstream, the passthrough and each OLP variant (cache hit, cache miss,
member key, no ledger, …) as separate processes, drives each row with the load generator
(its own process) for every mode and connection count, and writes the markdown report.
All children are stopped at the end, on failure and on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from olp.accounts import KeyLimits

from bench import cli_tools, cli_warm, procs
from bench.cells import Cell, RunInfo
from bench.issue_lines import MEMBER, MEMBER_BASE, MISS, MISS_BASE
from bench.loadgen import LoadResult
from bench.measure import Round, Workload, measure_round, run_loadgen, to_cell
from bench.payloads import MODEL, TOKEN
from bench.report import render
from bench.targets import SMOKE_REQUESTS, OlpLaunch, Targets, Variant

REPO = Path(__file__).resolve().parent.parent
CONNS = (1, 16, 64)
# Distinct request bodies per generator run: far more than any row completes in a round
# (a cache miss does a few thousand per second), and the generator stops rather than
# send one twice.
RING = 32_768


# --- How OLP runs in the benchmark: the one place to change it. ---------------------------


def olp_config(upstream_port: int, *, cache: bool = False, ledger: bool = True) -> dict[str, Any]:
    return {
        "providers": {
            "bench": {"type": "openai-http", "base_url": f"http://127.0.0.1:{upstream_port}/v1"}
        },
        "routing": {"chains": {MODEL: [{"provider": "bench", "model": MODEL}]}},
        # Off unless a variant measures it: every `olp` request is identical, so with the
        # cache on OLP would answer from memory, and the run would measure cache hits,
        # not the proxying path.
        # The request sets no temperature, so without `serve_nondeterministic` the cache
        # would only store its answers (a sampled request regenerates): olp-hit measures
        # answering from the cache.
        "cache": {"enabled": cache, "serve_nondeterministic": True},
        "ledger": {"enabled": ledger},
        # A price, as a real deployment has for its models: the member key's USD budget
        # needs one (a budget fails closed on a model OLP cannot price), and every row
        # then computes the same costs for its ledger and limits.
        "pricing": {MODEL: {"input": 0.15, "output": 0.6}},
    }


# Limits so high that nothing is refused: the member variant pays for checking all five.
MEMBER_LIMITS = KeyLimits(rpm=10**9, rpd=10**9, tpd=10**12, usd_month=1e9, concurrent=10**6)

VARIANTS = (
    Variant("olp", olp_config),  # owner token, cache off, ledger on (the default)
    Variant("olp-hit", lambda port: olp_config(port, cache=True)),
    Variant("olp-miss", lambda port: olp_config(port, cache=True)),
    # The `olp` config again, in a process of its own: the baseline of olp-miss serves the
    # same traffic as olp-miss and nothing else, so both have the same history (ledger
    # size, heap) when they are compared.
    Variant("olp-distinct", olp_config),
    Variant("olp-member", olp_config, member_limits=MEMBER_LIMITS),
    Variant("olp-bare", lambda port: olp_config(port, ledger=False)),
)


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the results: an endpoint, a workload, and the connection counts it runs."""

    name: str
    endpoint: str  # "direct", "passthrough" or an OLP variant
    about: str  # the report's legend
    conns: tuple[int, ...] = CONNS
    distinct: bool = False  # a new request body (seed) every request


# The new rows run only at the connection counts their lines read (the budget lines at 64;
# at 1, what a request waits for), so that a full run stays within 10–17 minutes.
ROWS = (
    Row("direct", "direct", "the fake upstream itself, no proxy (the floor)"),
    Row("passthrough", "passthrough", "`bench/passthrough.py`, the minimal aiohttp proxy"),
    Row("olp", "olp", "OLP, cache off, owner token, ledger on (the default)"),
    Row(
        "olp-hit",
        "olp-hit",
        "OLP, cache on, every request identical: after the smoke check and the priming "
        "load every request is answered from memory, no upstream call",
        conns=(1, 64),
    ),
    Row(
        "olp-miss",
        "olp-miss",
        "OLP, cache on, every request distinct (a new `seed`): each one misses, leads a "
        "flight and writes its answer",
        conns=(1, 64),
        distinct=True,
    ),
    Row(
        "olp-distinct",
        "olp-distinct",
        "OLP configured as `olp` (cache off), in a process of its own, sent the same kind "
        "of distinct requests as `olp-miss`: its baseline",
        conns=(1, 64),
        distinct=True,
    ),
    Row(
        "olp-member",
        "olp-member",
        "OLP, cache off, a member key with all five limits set (rpm, rpd, tpd, usd_month, "
        "concurrent, too high to refuse anything), ledger on",
        conns=(1, 64),
    ),
    Row(
        "olp-bare",
        "olp-bare",
        'OLP, cache off, owner token (no limits), `"ledger": {"enabled": false}`: the '
        "baseline of `olp-member`",
        conns=(1, 64),
    ),
)


# The cost lines' (row, baseline) pairs: each gets `--pair-rounds` paired rounds.
COST_PAIRS = ((MISS, MISS_BASE), (MEMBER, MEMBER_BASE))


def olp_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "olp", "start", "--host", "127.0.0.1", "--port", str(port)]


def olp_env(home: Path) -> dict[str, str]:
    return {"OLP_HOME": str(home), "OLP_OWNER_TOKEN": TOKEN, "OLP_LOG_LEVEL": "warn"}


OLP = OlpLaunch(variants=VARIANTS, argv=olp_argv, env=olp_env)

# -------------------------------------------------------------------------------------------


class Runner:
    """Drives the rows; hands each generator run its own seeds and counts what was answered."""

    def __init__(self, targets: Targets, args: argparse.Namespace) -> None:
        self.targets = targets
        self.args = args
        self.rows = [r for r in ROWS if r.endpoint in targets.endpoints]
        self.next_seed = 0
        # Chat responses each server completed (smoke checks included): what its ledger
        # must hold.
        self.answered = dict.fromkeys(targets.endpoints, SMOKE_REQUESTS)

    def workload(self, row: Row) -> Workload:
        endpoint = self.targets.endpoints[row.endpoint]
        work = Workload(endpoint.url, endpoint.token)
        if row.distinct:
            # Seeds never repeat within a run, so no request is ever answered from cache.
            work = replace(work, distinct=RING, seed_base=self.next_seed)
            self.next_seed += RING
        return work

    def cells(self) -> list[Cell]:
        args = self.args
        per_round = args.duration / args.rounds
        cells = []
        for stream in (False, True):
            self.prime(stream)
            for conns in CONNS:
                rows = [r for r in self.rows if conns in r.conns]
                rounds: dict[str, list[Round]] = {r.name: [] for r in rows}
                for i in range(args.rounds):
                    # Round-robin with a rotating start, so a burst of outside load or a
                    # slow start after the previous row spreads over all rows alike.
                    for row in rows[i % len(rows) :] + rows[: i % len(rows)]:
                        rounds[row.name].append(self.measure(row, stream, conns, per_round))
                blocks = {r.name: [0] * args.rounds for r in rows}
                for pair in self.pairs(rows):
                    self.pair_rounds(pair, stream, conns, rounds, blocks)
                for row in rows:
                    proxy = self.targets.endpoints[row.endpoint].server
                    cell = to_cell(
                        row.name, proxy, stream, conns, rounds[row.name], tuple(blocks[row.name])
                    )
                    cells.append(cell)
                    _progress(cell)
        return cells

    def pair_rounds(
        self,
        pair: tuple[Row, Row],
        stream: bool,
        conns: int,
        rounds: dict[str, list[Round]],
        blocks: dict[str, list[int]],
    ) -> None:
        """A cost line's own rounds: its row and baseline back to back, alternating who
        goes first (the line reads round i of one against round i of the other).

        The rounds come in `--pair-blocks` blocks, each on a fresh pair of processes:
        two processes of the same code serve at steadily different speeds, so one pair
        alone cannot say what the code costs (`bench/stats.py`).
        """
        args = self.args
        per_round = args.duration / args.rounds
        size = args.pair_rounds // args.pair_blocks
        for j in range(args.rounds, args.pair_rounds):
            block = min(j // size, args.pair_blocks - 1)
            if block != blocks[pair[0].name][-1]:
                self.fresh_processes(pair, stream)
            for row in pair if j % 2 == 0 else pair[::-1]:
                rounds[row.name].append(self.measure(row, stream, conns, per_round))
                blocks[row.name].append(block)

    def fresh_processes(self, pair: tuple[Row, Row], stream: bool) -> None:
        """Restart both servers of a pair (same home, config and port), then warm them up."""
        for row in pair:
            self.targets.restart(row.endpoint)
        self.warm_up("warming up restarted", pair, stream, conns=64, seconds=1.0)

    def measure(self, row: Row, stream: bool, conns: int, duration: float) -> Round:
        result = measure_round(
            self.workload(row),
            stream,
            conns,
            self.args.warmup,
            duration,
            self.args.procs,
            list(self.targets.servers.values()),
            self.targets.involved(row.endpoint),
        )
        self.answered[row.endpoint] += result.load.total_requests
        time.sleep(0.1)  # let closed sockets drain before the next round
        return result

    def pairs(self, rows: list[Row]) -> list[tuple[Row, Row]]:
        """The (row, baseline) pairs of the cost lines among `rows`."""
        by_name = {r.name: r for r in rows}
        return [(by_name[a], by_name[b]) for a, b in COST_PAIRS if a in by_name and b in by_name]

    def prime(self, stream: bool) -> None:
        """Unmeasured load on every row first: lazy imports, pools, first-call paths, and
        the entry every cache hit will be answered from."""
        self.warm_up("priming", self.rows, stream, conns=16, seconds=0.5)

    def warm_up(
        self, why: str, rows: Sequence[Row], stream: bool, *, conns: int, seconds: float
    ) -> None:
        """Unmeasured load on `rows`, counted as answered; errors go into the report."""
        for row in rows:
            load = run_loadgen(self.workload(row), stream, conns, self.args.warmup, seconds, 1)
            self.answered[row.endpoint] += load.total_requests
            if load.non_2xx or load.errors:
                self.targets.notes.append(
                    f"{why} {row.name} ({'streaming' if stream else 'non-streaming'}) saw "
                    f"{load.non_2xx} non-2xx and {load.errors or 'no other'} errors"
                )


def _progress(c: Cell) -> None:
    print(
        f"{c.target:>12} {'stream' if c.stream else 'json':>6} {c.conns:>3} conns: "
        f"{c.rps:>9,.0f} req/s  p50 {c.p50_ms:.3f} ms  p99 {c.p99_ms:.3f} ms  "
        f"errors {c.errors}  other load {c.other_load:.0%}",
        file=sys.stderr,
        flush=True,
    )


def machine_info(args: argparse.Namespace, argv: list[str]) -> RunInfo:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    versions = {}
    for dist in ("olp", "aiohttp", "uvloop", "orjson", "uvicorn"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "absent"
    return RunInfo(
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command=" ".join(["python -m bench.run", *argv]),
        cores=os.cpu_count() or 0,
        cpu_model=model,
        kernel=platform.release(),
        python=platform.python_version(),
        versions=versions,
        warmup_s=args.warmup,
        duration_s=args.duration,
        rounds=args.rounds,
        loadgen_procs=args.procs,
        pair_rounds=args.pair_rounds,
        pair_blocks=args.pair_blocks,
        legend=[(r.name, r.about) for r in ROWS if not args.no_olp or r.endpoint in _NO_OLP],
    )


_NO_OLP = ("direct", "passthrough")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--duration", type=float, help="measured seconds per cell (all rounds)")
    parser.add_argument("--rounds", type=int, help="rounds each cell's duration is split into")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds before each round")
    parser.add_argument(
        "--pair-rounds",
        type=int,
        help="rounds of each cost line's row and baseline, paired (at least --rounds × "
        "--pair-blocks; "
        "default 30, --quick: 1): the more, the narrower the cost's interval",
    )
    parser.add_argument(
        "--pair-blocks",
        type=int,
        help="fresh pairs of server processes each cost line's rounds are spread over "
        "(default 6, --quick: 1): with 6 or more, the cost's interval is over them",
    )
    parser.add_argument("--procs", type=int, default=1, help="load generator processes")
    parser.add_argument(
        "--upstream-delay-ms",
        type=float,
        default=0.0,
        help="the fake upstream waits this long before each answer, like a model (e.g. 20)",
    )
    parser.add_argument("--no-olp", action="store_true", help="direct and passthrough only")
    parser.add_argument(
        "--cli",
        action="store_true",
        help="measure the CLI section instead: time to first token through the real claude "
        "CLI, cold and warm (bench/cli_warm.py), then with a client tool and without "
        "(bench/cli_tools.py); with --quick, their quick runs",
    )
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "performance.md")
    parser.add_argument("--raw-dir", type=Path, default=REPO / "bench" / "results")
    parser.add_argument(
        "--from-raw",
        type=Path,
        metavar="FILE",
        help="measure nothing: write the report of an earlier run from its raw numbers "
        "(bench/results/<timestamp>.json), e.g. after changing bench/report.py",
    )
    args = parser.parse_args(argv)
    quick = {"duration": 1.0, "rounds": 1, "warmup": 0.3, "pair_rounds": 1, "pair_blocks": 1}
    full = {"duration": 5.0, "rounds": 5, "warmup": 0.3, "pair_rounds": 30, "pair_blocks": 6}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.pair_blocks < 1:
        parser.error("--pair-blocks must be at least 1")
    # The interleaved rounds run on the first pair of processes: every block gets as many.
    args.pair_rounds = max(args.pair_rounds, args.rounds * args.pair_blocks)
    return args


def main(argv: list[str] | None = None) -> None:
    try:
        _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        print("interrupted: every child process was stopped", file=sys.stderr)
        raise SystemExit(130) from None


def _main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.cli:
        cli_warm.main(["--quick"] if args.quick else [])
        cli_tools.main(["--quick"] if args.quick else [])
        return
    if args.from_raw is not None:
        _publish(args.out, render(*_read_raw(args.from_raw)))
        return
    procs.stop_children_on_sigterm()
    info = machine_info(args, argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="olp-bench-") as tmp:
        targets = Targets(Path(tmp), args.upstream_delay_ms)
        try:
            targets.start(None if args.no_olp else OLP)
            runner = Runner(targets, args)
            cells = runner.cells()
            for name in ("olp-hit", "olp-miss"):
                if (stats := targets.cache_stats(name)) is not None:
                    info.cache_stats[name] = {
                        k: int(stats[k]) for k in ("hits", "misses", "shared", "bypasses")
                    }
        finally:
            targets.stop()
        # Read once the servers are stopped: shutdown writes every row still queued.
        for name in ("olp", "olp-distinct", "olp-member", "olp-bare"):
            if (rows := targets.ledger_rows(name)) is not None:
                info.ledger_rows[name] = rows
                info.answered[name] = runner.answered[name]
    info.notes += targets.notes
    info.notes.append(f"the run took {time.monotonic() - started:.0f} s")
    _write_raw(args.raw_dir, info, cells)
    _publish(args.out, render(info, cells))


def _publish(out: Path, report: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(report)


def _write_raw(raw_dir: Path, info: RunInfo, cells: list[Cell]) -> None:
    """Every round's numbers, for anyone who wants more than the medians (git-ignored)."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = {"info": asdict(info), "cells": [asdict(c) for c in cells]}
    (raw_dir / f"{stamp}.json").write_text(json.dumps(payload, indent=1, default=str))


def _read_raw(path: Path) -> tuple[RunInfo, list[Cell]]:
    """What `_write_raw` wrote, as the report takes it."""
    payload = json.loads(path.read_text())
    info = payload["info"]
    info["legend"] = [tuple(item) for item in info["legend"]]
    cells = [
        Cell(
            **{
                **c,
                "rounds": tuple(LoadResult(**r) for r in c["rounds"]),
                "blocks": tuple(c.get("blocks", ())),
            }
        )
        for c in payload["cells"]
    ]
    return RunInfo(**info), cells


if __name__ == "__main__":
    main()
