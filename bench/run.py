"""Run the whole benchmark: upstream direct, passthrough and OLP, side by side in one run.

    python -m bench.run [--quick] [--duration S] [--out docs/performance.md] [--no-olp]

Starts the fake upstream, the passthrough and OLP as separate processes, drives each with
the load generator (its own process) for every mode and connection count, and writes the
markdown report. All children are stopped at the end, on failure and on Ctrl-C too.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

import orjson

from bench import procs
from bench.loadgen import LoadResult
from bench.payloads import CHAT_PATH, MODEL, TOKEN, request_body
from bench.report import Cell, RunInfo, render

REPO = Path(__file__).resolve().parent.parent
CONNS = (1, 16, 64)
PY = sys.executable
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def olp_config(upstream_port: int) -> dict[str, Any]:
    """OLP's config.json for the run — the one place to change it."""
    return {
        "providers": {
            "bench": {"type": "openai-http", "base_url": f"http://127.0.0.1:{upstream_port}/v1"}
        },
        "routing": {"chains": {MODEL: [{"provider": "bench", "model": MODEL}]}},
        # Every request is identical: with the cache on, OLP would answer from memory and
        # the run would measure cache hits, not the proxying path.
        "cache": {"enabled": False},
    }


def olp_env(home: Path) -> dict[str, str]:
    return {"OLP_HOME": str(home), "OLP_OWNER_TOKEN": TOKEN, "OLP_LOG_LEVEL": "warn"}


def olp_argv(port: int) -> list[str]:
    return [PY, "-m", "olp", "start", "--host", "127.0.0.1", "--port", str(port)]


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.servers: dict[str, procs.Server] = {}
        self.urls: dict[str, str] = {}  # target -> chat completions URL
        self.notes: list[str] = []

    def start_servers(self) -> None:
        up_port = procs.free_port()
        base = f"http://127.0.0.1:{up_port}"
        self._start("upstream", [PY, "-m", "bench.fake_upstream", "--port", str(up_port)], {})
        procs.wait_ready(self.servers["upstream"], lambda: _ok("GET", base + "/v1/models"))
        self.urls["direct"] = base + CHAT_PATH

        pt_port = procs.free_port()
        argv = [PY, "-m", "bench.passthrough", "--port", str(pt_port), "--upstream", base]
        self._start("passthrough", argv, {})
        pt_url = f"http://127.0.0.1:{pt_port}{CHAT_PATH}"
        procs.wait_ready(self.servers["passthrough"], lambda: _ok("POST", pt_url))
        self.urls["passthrough"] = pt_url

        for target in ("direct", "passthrough"):
            if problem := smoke_check(self.urls[target]):
                raise RuntimeError(f"{target} fails its smoke check: {problem}")
        if not self.args.no_olp:
            self._start_olp(up_port)

    def _start_olp(self, up_port: int) -> None:
        home = self.workdir / "olp-home"
        home.mkdir()
        (home / "config.json").write_bytes(orjson.dumps(olp_config(up_port)))
        port = procs.free_port()
        base = f"http://127.0.0.1:{port}"
        server = self._start("olp", olp_argv(port), olp_env(home))
        try:
            procs.wait_ready(server, lambda: _ok("GET", base + "/health"))
            if problem := smoke_check(base + CHAT_PATH):
                raise procs.StartError(f"OLP fails its smoke check: {problem}")
        except procs.StartError as exc:
            # The other targets still make a useful report; say why OLP is missing.
            print(f"OLP not measured: {exc}", file=sys.stderr)
            self.notes.append(f"OLP not measured: {str(exc).splitlines()[0]}")
            procs.stop(self.servers.pop("olp"))
            return
        self.urls["olp"] = base + CHAT_PATH

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> procs.Server:
        server = procs.start(name, argv, self.workdir, env)
        self.servers[name] = server
        return server

    def stop_servers(self) -> None:
        for server in reversed(list(self.servers.values())):
            procs.stop(server)

    def measure(self, target: str, stream: bool, conns: int) -> Cell:
        servers = list(self.servers.values())
        involved = [self.servers["upstream"]]
        if target != "direct":
            involved.insert(0, self.servers[target])
        cpu0 = {s.name: s.cpu_s() for s in servers}
        ours0 = _children_cpu_s()
        busy0, wall0 = procs.machine_busy_s(), time.monotonic()
        load = run_loadgen(self.urls[target], stream, conns, self.args)
        busy, wall = procs.machine_busy_s() - busy0, time.monotonic() - wall0
        cpu = {s.name: s.cpu_s() - cpu0[s.name] for s in servers}
        # What the machine did beyond this run (other tenants, steal): it competes with the
        # servers under test, so a cell with much of it is noisy.
        other = busy - sum(cpu.values()) - (_children_cpu_s() - ours0)
        done = max(load.total_requests, 1)
        return Cell(
            target=target,
            stream=stream,
            conns=conns,
            load=load,
            cpu_us_per_req={s.name: cpu[s.name] / done * 1e6 for s in involved},
            rss_mib={s.name: s.rss_mib() for s in involved},
            other_load=max(other, 0.0) / (wall * (os.cpu_count() or 1)),
        )


def _children_cpu_s() -> float:
    """CPU of reaped children: the load generators (and their shards) run so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _ok(method: str, url: str) -> bool:
    body = request_body(stream=False) if method == "POST" else None
    return procs.http(method, url, body, AUTH)[0] == 200


def smoke_check(url: str) -> str | None:
    """One request per mode before any load: what is wrong, or None."""
    status, body = procs.http("POST", url, request_body(stream=False), AUTH)
    if status != 200:
        return f"non-streaming: HTTP {status}: {body[:300]!r}"
    try:
        content = orjson.loads(body)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return f"non-streaming: not a chat completion: {body[:300]!r}"
    if not content:
        return "non-streaming: empty content"
    status, body = procs.http("POST", url, request_body(stream=True), AUTH)
    if status != 200:
        return f"streaming: HTTP {status}: {body[:300]!r}"
    if b'"content":"' not in body or not body.rstrip().endswith(b"data: [DONE]"):
        return f"streaming: not an SSE chat stream ending in [DONE]: {body[-300:]!r}"
    return None


def run_loadgen(url: str, stream: bool, conns: int, args: argparse.Namespace) -> LoadResult:
    argv = [PY, "-m", "bench.loadgen", "--url", url, "--conns", str(conns)]
    argv += ["--duration", str(args.duration), "--warmup", str(args.warmup)]
    argv += ["--procs", str(args.procs)] + (["--stream"] if stream else [])
    # Its own session, so a failure here can kill the generator and any shard it spawned.
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=args.warmup + args.duration + 60)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"load generator failed ({proc.returncode}): {err.decode()[-2000:]}")
    raw: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    # orjson writes NaN as null; the report expects NaN for "not measured".
    fields: dict[str, Any] = {k: math.nan if v is None else v for k, v in raw.items()}
    return LoadResult(**fields)


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
    now = datetime.datetime.now(datetime.UTC)
    return RunInfo(
        date=now.strftime("%Y-%m-%d %H:%M UTC"),
        command=" ".join(["python -m bench.run", *argv]).strip(),
        cores=os.cpu_count() or 0,
        cpu_model=model,
        kernel=platform.release(),
        python=platform.python_version(),
        versions=versions,
        warmup_s=args.warmup,
        duration_s=args.duration,
        loadgen_procs=args.procs,
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short cells: a smoke run")
    parser.add_argument("--duration", type=float, help="measured seconds per cell")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds per cell")
    parser.add_argument("--procs", type=int, default=1, help="load generator processes")
    parser.add_argument("--no-olp", action="store_true", help="direct and passthrough only")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "performance.md")
    parser.add_argument(
        "--raw-dir", type=Path, default=REPO / "bench" / "results", help="raw JSON per run"
    )
    args = parser.parse_args(argv)
    if args.duration is None:
        args.duration = 1.0 if args.quick else 5.0
    if args.warmup is None:
        args.warmup = 0.3 if args.quick else 1.0
    return args


def _exit_on_sigterm(signum: int, _frame: object) -> NoReturn:
    raise SystemExit(128 + signum)  # unwinds through the finally that stops the children


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    info = machine_info(args, argv)
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="olp-bench-") as tmp:
        bench = Bench(args, Path(tmp))
        try:
            bench.start_servers()
            targets = [t for t in ("direct", "passthrough", "olp") if t in bench.urls]
            # Targets interleave inside each (mode, conns) so that drift over the run
            # (thermal, other tenants) hits the three columns alike.
            for stream in (False, True):
                for conns in CONNS:
                    for target in targets:
                        cell = bench.measure(target, stream, conns)
                        cells.append(cell)
                        _progress(cell)
                        time.sleep(0.2)  # let sockets drain before the next cell
        finally:
            bench.stop_servers()
    info.notes += bench.notes
    report = render(info, cells)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    _write_raw(args.raw_dir, info, cells)
    print(report)


def _progress(c: Cell) -> None:
    lo = c.load
    print(
        f"{c.target:>11} {'stream' if c.stream else 'json':>6} {c.conns:>3} conns: "
        f"{lo.rps:>9,.0f} req/s  p50 {lo.p50_ms:.3f} ms  p99 {lo.p99_ms:.3f} ms  "
        f"errors {c.errors}  other load {c.other_load:.0%}",
        file=sys.stderr,
        flush=True,
    )


def _write_raw(raw_dir: Path, info: RunInfo, cells: list[Cell]) -> None:
    raw_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = {"info": asdict(info), "cells": [asdict(c) for c in cells]}
    (raw_dir / f"{stamp}.json").write_text(json.dumps(payload, indent=1, default=str))


if __name__ == "__main__":
    main()
