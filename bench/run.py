"""Run the whole benchmark: upstream direct, passthrough and OLP, side by side in one run.

    python -m bench.run [--quick] [--duration S] [--rounds N] [--out docs/performance.md]

Starts the fake upstream, the passthrough and OLP as separate processes, drives each with
the load generator (its own process) for every mode and connection count, and writes the
markdown report. All children are stopped at the end, on failure and on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

from bench.measure import Round, measure_round, run_loadgen, to_cell
from bench.payloads import MODEL, TOKEN
from bench.report import Cell, RunInfo, render
from bench.targets import OlpLaunch, Targets

REPO = Path(__file__).resolve().parent.parent
CONNS = (1, 16, 64)
TARGETS = ("direct", "passthrough", "olp")


# --- How OLP runs in the benchmark: the one place to change it. ---------------------------


def olp_config(upstream_port: int) -> dict[str, Any]:
    return {
        "providers": {
            "bench": {"type": "openai-http", "base_url": f"http://127.0.0.1:{upstream_port}/v1"}
        },
        "routing": {"chains": {MODEL: [{"provider": "bench", "model": MODEL}]}},
        # Every request is identical: with the cache on, OLP would answer from memory and
        # the run would measure cache hits, not the proxying path.
        "cache": {"enabled": False},
    }


def olp_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "olp", "start", "--host", "127.0.0.1", "--port", str(port)]


def olp_env(home: Path) -> dict[str, str]:
    return {"OLP_HOME": str(home), "OLP_OWNER_TOKEN": TOKEN, "OLP_LOG_LEVEL": "warn"}


OLP = OlpLaunch(config=olp_config, argv=olp_argv, env=olp_env)

# -------------------------------------------------------------------------------------------


def run_cells(targets: Targets, args: argparse.Namespace) -> list[Cell]:
    names = [t for t in TARGETS if t in targets.urls]
    servers = list(targets.servers.values())
    per_round = args.duration / args.rounds
    cells = []
    for stream in (False, True):
        _prime(targets, names, stream, args)
        for conns in CONNS:
            rounds: dict[str, list[Round]] = {t: [] for t in names}
            for i in range(args.rounds):
                # Round-robin with a rotating start, so a burst of outside load or a slow
                # start after the previous target spreads over all targets alike.
                for target in names[i % len(names) :] + names[: i % len(names)]:
                    rounds[target].append(
                        measure_round(
                            targets.urls[target],
                            stream,
                            conns,
                            args.warmup,
                            per_round,
                            args.procs,
                            servers,
                            targets.involved(target),
                        )
                    )
                    time.sleep(0.1)  # let closed sockets drain before the next round
            for target in names:
                cells.append(to_cell(target, stream, conns, rounds[target]))
                _progress(cells[-1])
    return cells


def _prime(targets: Targets, names: list[str], stream: bool, args: argparse.Namespace) -> None:
    """Unmeasured load on every target first: lazy imports, pools, first-call paths."""
    for target in names:
        load = run_loadgen(targets.urls[target], stream, 16, args.warmup, 0.5, 1)
        if load.non_2xx or load.errors:
            targets.notes.append(
                f"priming {target} ({'streaming' if stream else 'non-streaming'}) saw "
                f"{load.non_2xx} non-2xx and {load.errors or 'no other'} errors"
            )


def _progress(c: Cell) -> None:
    print(
        f"{c.target:>11} {'stream' if c.stream else 'json':>6} {c.conns:>3} conns: "
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
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--duration", type=float, help="measured seconds per cell (all rounds)")
    parser.add_argument("--rounds", type=int, help="rounds each cell's duration is split into")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds before each round")
    parser.add_argument("--procs", type=int, default=1, help="load generator processes")
    parser.add_argument("--no-olp", action="store_true", help="direct and passthrough only")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "performance.md")
    parser.add_argument("--raw-dir", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    quick = {"duration": 1.0, "rounds": 1, "warmup": 0.3}
    full = {"duration": 5.0, "rounds": 5, "warmup": 0.3}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def _exit_on_sigterm(signum: int, _frame: object) -> NoReturn:
    raise SystemExit(128 + signum)  # unwinds through the finally that stops the children


def main(argv: list[str] | None = None) -> None:
    try:
        _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        print("interrupted: every child process was stopped", file=sys.stderr)
        raise SystemExit(130) from None


def _main(argv: list[str]) -> None:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    info = machine_info(args, argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="olp-bench-") as tmp:
        targets = Targets(Path(tmp))
        try:
            targets.start(None if args.no_olp else OLP)
            cells = run_cells(targets, args)
        finally:
            targets.stop()
    info.notes += targets.notes
    info.notes.append(f"the run took {time.monotonic() - started:.0f} s")
    report = render(info, cells)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    _write_raw(args.raw_dir, info, cells)
    print(report)


def _write_raw(raw_dir: Path, info: RunInfo, cells: list[Cell]) -> None:
    """Every round's numbers, for anyone who wants more than the medians (git-ignored)."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = {"info": asdict(info), "cells": [asdict(c) for c in cells]}
    (raw_dir / f"{stamp}.json").write_text(json.dumps(payload, indent=1, default=str))


if __name__ == "__main__":
    main()
