"""The CLI section: time to first token through a subscription CLI, cold and warm.

    python -m bench.cli_warm [--rounds 7] [--settle 3] [--claude PATH] [--out FILE]
    python -m bench.run --cli            # the same

Side by side in one run, against this benchmark's fake upstream (Anthropic Messages on
127.0.0.1), with the real claude CLI:

- **direct**: the CLI run by hand, no OLP: OLP's own invocation (same flags, same stdin,
  an empty HOME) started cold; time from starting it to its first text delta on stdout;
- **olp-warm0**: `olp start` with `"warm": 0`: every request starts the CLI; time from
  sending a streamed chat request to the first SSE frame with text;
- **direct-warm**: the CLI run by hand, started ahead like OLP's warm pool does (same
  invocation), given its prompt once settled; time from writing the prompt to its first
  text delta;
- **olp-warm2**: the same with `"warm": 2`: every request finds a CLI waiting for its
  prompt.

Each round measures the three rows once, in an order that rotates; before each
measurement the run waits until `olp-warm2` has both its processes started and then
`--settle` seconds more, so a CLI starting in the background (a replacement) does not
share the cores with the one measured. The medians are over the rounds.

Lines: warm ≤ 0.25 × cold (`olp-warm2` / `olp-warm0`), and OLP's overhead over the CLI
run directly ≤ 20 ms at the median, read twice: warm (`olp-warm2` − `direct-warm`: both
start from a waiting CLI, so little but OLP differs) and cold (`olp-warm0` − `direct`: a
cold start varies by hundreds of milliseconds from one run to the next on a busy machine,
so that line needs many rounds to mean much). The report also gives the resident memory of
each waiting CLI process (the pool's cost).
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from olp.config.model import Timeouts
from olp.ir import ChatRequest, Message
from olp.providers.claude_cli.translate import build_invocation

from bench import procs

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
TOKEN = "bench-token"
MODEL = "claude-sonnet-4-5"
CHAIN = "bench-claude"
PROMPT = "Say hello"
ROWS = ("direct", "olp-warm0", "direct-warm", "olp-warm2")
WARM = {"olp-warm0": 0, "olp-warm2": 2}
# Where the real-CLI tests install it (tests/real_cli.py).
_TEST_CACHE = Path.home() / ".cache" / "olp-test-clis"
_CLAUDE_IN_CACHE = "@anthropic-ai__claude-code@2.1.197/node_modules/.bin/claude"
RATIO_BUDGET = 0.25
_WARM_METRICS = {
    "olp_cli_warm_size": "size",
    "olp_cli_warm_waiting": "waiting",
    "olp_cli_warm_hits_total": "hits",
    "olp_cli_warm_misses_total": "misses",
}
OVERHEAD_BUDGET_MS = 20.0


@dataclass
class Results:
    ttft_ms: dict[str, list[float]] = field(default_factory=lambda: {r: [] for r in ROWS})
    waiting_rss_mib: list[float] = field(default_factory=list)
    hits_misses: tuple[int, int] | None = None
    notes: list[str] = field(default_factory=list)


def find_claude(given: str | None) -> str:
    for candidate in (given, os.environ.get("OLP_BENCH_CLAUDE")):
        if candidate:
            return candidate
    cached = _TEST_CACHE / _CLAUDE_IN_CACHE
    if cached.exists():
        return str(cached)
    found = shutil.which("claude")
    if found is None:
        raise SystemExit("no claude CLI: pass --claude PATH (npm i -g @anthropic-ai/claude-code)")
    return found


def cli_env(upstream: str, claude: str) -> dict[str, str]:
    """What the provider's `env` gives the CLI (the same for the direct row)."""
    path = f"{Path(claude).resolve().parent}:{Path(claude).parent}:/usr/local/bin:/usr/bin:/bin"
    return {"ANTHROPIC_BASE_URL": upstream, "ANTHROPIC_API_KEY": "sk-ant-bench", "PATH": path}


def olp_config(warm: int, upstream: str, claude: str) -> dict[str, Any]:
    return {
        "providers": {
            "claude": {
                "type": "claude-cli",
                "command": claude,
                "warm": warm,
                "env": cli_env(upstream, claude),
                "timeouts": {"first_byte_ms": 60_000, "idle_ms": 60_000, "total_ms": 120_000},
            }
        },
        "routing": {"chains": {CHAIN: [{"provider": "claude", "model": MODEL}]}},
        "cache": {"enabled": False},
    }


class Bench:
    """Owns the processes of a run; `stop()` must run whatever happened."""

    def __init__(self, workdir: Path, claude: str, olps: Mapping[str, int] = WARM) -> None:
        """`olps`: the `olp start` processes to run, by name, with their `warm`."""
        self.workdir = workdir
        self.claude = claude
        self.olps = olps
        self.servers: dict[str, procs.Server] = {}
        self.ports: dict[str, int] = {}
        self.upstream = ""
        self._waiting: _DirectCli | None = None

    def start(self) -> None:
        port = procs.free_port()
        self.upstream = f"http://127.0.0.1:{port}"
        up = self._spawn("upstream", [PY, "-m", "bench.fake_upstream", "--port", str(port)], {})
        procs.wait_ready(up, lambda: procs.http("GET", self.upstream + "/v1/models")[0] == 200)
        owner = self.workdir / "owner-home"  # no login of the machine's owner is linked in
        owner.mkdir()
        for name, warm in self.olps.items():
            home = self.workdir / f"{name}-home"
            home.mkdir()
            config = olp_config(warm, self.upstream, self.claude)
            (home / "config.json").write_text(json.dumps(config))
            olp_port = procs.free_port()
            env = {
                "OLP_HOME": str(home),
                "OLP_OWNER_TOKEN": TOKEN,
                "OLP_LOG_LEVEL": "warn",
                "HOME": str(owner),
            }
            argv = [PY, "-m", "olp", "start", "--host", "127.0.0.1", "--port", str(olp_port)]
            server = self._spawn(name, argv, env)
            self.ports[name] = olp_port
            health = f"http://127.0.0.1:{olp_port}/health"
            procs.wait_ready(server, functools.partial(_answers, health))

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> procs.Server:
        server = procs.start(name, argv, self.workdir, env)
        self.servers[name] = server
        return server

    def stop(self) -> None:
        if self._waiting is not None:
            self._waiting.close()
        for server in self.servers.values():
            procs.stop(server)

    # -- measuring ---------------------------------------------------------------------

    def prepare(self, row: str) -> None:
        """Before the settling: start `direct-warm`'s CLI, which then waits for its prompt."""
        if row == "direct-warm":
            self._waiting = _DirectCli(self, self.workdir, self.claude)

    def measure(self, row: str) -> float:
        if row == "direct":
            cli = _DirectCli(self, self.workdir, self.claude)
            return cli.first_delta_ms(started=cli.started)
        if row == "direct-warm":
            waiting, self._waiting = self._waiting, None
            assert waiting is not None, "prepare('direct-warm') first"
            return waiting.first_delta_ms(started=time.perf_counter())
        return self.through_olp(row)

    def through_olp(self, name: str, extra: Mapping[str, Any] | None = None) -> float:
        """ms from sending a streamed chat request to the first SSE frame with text.

        `extra`: more fields of the request (`tools`, ...)."""
        request = {"model": CHAIN, "messages": [{"role": "user", "content": PROMPT}]}
        body = json.dumps({**request, **(extra or {}), "stream": True})
        conn = http.client.HTTPConnection("127.0.0.1", self.ports[name], timeout=120)
        try:
            started = time.perf_counter()
            conn.request(
                "POST",
                "/v1/chat/completions",
                body,
                {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"{name}: HTTP {resp.status}: {resp.read()[:300]!r}")
            first = None
            for line in resp:
                if first is None and line.startswith(b"data: {") and _has_text(line[6:]):
                    first = (time.perf_counter() - started) * 1000
            if first is None:
                raise RuntimeError(f"{name}: an answer without text")
            return first
        finally:
            conn.close()

    def settle(self, seconds: float, pool: str = "olp-warm2") -> None:
        """Until olp `pool` has its processes started and every CLI waiting for a prompt
        (the pool's, `direct-warm`'s) has stopped using the CPU, then `seconds` more."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            warm = self.warm_stats(pool)
            if warm is None or warm["hits"] + warm["misses"] == 0:
                break  # not asked yet: nothing started
            if warm["waiting"] >= warm["size"]:
                break
            time.sleep(0.2)
        waiting = self.children(pool)
        if self._waiting is not None:
            waiting.append(self._waiting.proc.pid)
        _until_idle(waiting, deadline)
        time.sleep(seconds)

    def warm_stats(self, name: str) -> dict[str, float] | None:
        """The pool's figures from `/metrics` (`size`, `waiting`, `hits`, `misses`), not from
        the status page: that one refreshes stale health checks, which start the CLI
        (`--version`) — on the cores of the next measurement."""
        status, body = procs.http(
            "GET",
            f"http://127.0.0.1:{self.ports[name]}/metrics",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        if status != 200:
            return None
        figures = {}
        for line in body.decode().splitlines():
            metric, _, value = line.partition('{provider="claude"} ')
            if metric in _WARM_METRICS and value:
                figures[_WARM_METRICS[metric]] = float(value)
        return figures if len(figures) == len(_WARM_METRICS) else None

    def children(self, name: str) -> list[int]:
        """The CLI processes olp `name` runs or keeps waiting (its children)."""
        parent = str(self.servers[name].pid)
        return [int(pid) for pid, fields in _status_all().items() if fields["PPid"] == parent]

    def waiting_rss_mib(self, name: str) -> list[float]:
        """Resident memory of each CLI process olp `name` keeps waiting."""
        statuses = _status_all()
        return [
            int(statuses[str(pid)].get("VmRSS", "0 kB").split()[0]) / 1024
            for pid in self.children(name)
            if str(pid) in statuses
        ]


def _answers(url: str) -> bool:
    return procs.http("GET", url)[0] == 200


def _status_all() -> dict[str, dict[str, str]]:
    """/proc/<pid>/status of every process, as {pid: {field: value}}."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "status").read_text()
            except OSError:
                continue
            found[entry.name] = {
                k: v.strip() for k, _, v in (ln.partition(":") for ln in text.splitlines())
            }
    return found


def _cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        total += sum(int(x) for x in raw[raw.rindex(")") + 2 :].split()[11:13])
    return total


def _until_idle(pids: list[int], deadline: float, quiet_s: float = 0.5) -> None:
    """Until `pids` use no CPU for `quiet_s` (a started CLI done with its start-up)."""
    last = _cpu_ticks(pids)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = _cpu_ticks(pids)
        if now == last:
            return
        last = now


def _has_text(payload: bytes) -> bool:
    try:
        doc = json.loads(payload)
    except ValueError:
        return False
    return any((c.get("delta") or {}).get("content") for c in doc.get("choices") or ())


class _DirectCli:
    """The CLI started by hand with OLP's own invocation, in a private HOME and work dir."""

    def __init__(self, bench: Bench, workdir: Path, claude: str) -> None:
        self.invocation = build_invocation(
            ChatRequest(model=MODEL, messages=(Message("user", PROMPT),)), Timeouts()
        )
        self.box = Path(tempfile.mkdtemp(prefix="direct-", dir=workdir))
        home, work, tmp = self.box / "home", self.box / "work", self.box / "tmp"
        for sub in (home, work, tmp):
            sub.mkdir()
        env = {
            **cli_env(bench.upstream, claude),
            **self.invocation.env,
            "HOME": str(home),
            "TZ": "UTC",
            "TMPDIR": str(tmp),
        }
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [claude, *self.invocation.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=work,
            start_new_session=True,
        )

    def first_delta_ms(self, started: float) -> float:
        """Write the prompt; ms from `started` to the first text delta on stdout."""
        proc = self.proc
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(self.invocation.stdin)
            proc.stdin.close()
            for line in proc.stdout:
                doc = json.loads(line) if line.startswith(b"{") else {}
                event = doc.get("event") or {}
                if event.get("type") == "content_block_delta" and event["delta"].get("text"):
                    return (time.perf_counter() - started) * 1000
            raise RuntimeError(f"the CLI ended without a text delta (status {proc.wait()})")
        finally:
            self.close()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.box, ignore_errors=True)


def run(rounds: int, settle_s: float, claude: str) -> Results:
    results = Results()
    with tempfile.TemporaryDirectory(prefix="olp-bench-cli-") as tmp:
        bench = Bench(Path(tmp), claude)
        try:
            bench.start()
            for row in ROWS:  # unmeasured: checks each answers, fills olp-warm2's pool
                bench.prepare(row)
                bench.settle(settle_s)
                bench.measure(row)
            for i in range(rounds):
                for j in range(len(ROWS)):
                    row = ROWS[(i + j) % len(ROWS)]
                    bench.prepare(row)
                    bench.settle(settle_s)
                    results.ttft_ms[row].append(bench.measure(row))
                print(
                    f"round {i + 1}/{rounds}: "
                    + ", ".join(f"{r} {results.ttft_ms[r][-1]:.0f} ms" for r in ROWS),
                    file=sys.stderr,
                )
            bench.settle(settle_s)
            results.waiting_rss_mib = bench.waiting_rss_mib("olp-warm2")
            warm = bench.warm_stats("olp-warm2")
            if warm is not None:
                results.hits_misses = (int(warm["hits"]), int(warm["misses"]))
        finally:
            bench.stop()
    return results


def render(results: Results, claude: str, rounds: int, settle_s: float) -> str:
    med = {r: statistics.median(v) for r, v in results.ttft_ms.items() if v}
    lines = [
        "## CLI: time to first token, cold and warm (`python -m bench.cli_warm`)",
        "",
        f"claude CLI `{claude}`; {rounds} rounds, {settle_s:g} s settle; "
        f"{os.cpu_count()} cores; fake upstream on 127.0.0.1.",
        "",
        "| row | median ms | min | max |",
        "|---|---:|---:|---:|",
    ]
    for row in ROWS:
        values = results.ttft_ms[row]
        lines.append(f"| {row} | {med[row]:.0f} | {min(values):.0f} | {max(values):.0f} |")
    ratio = med["olp-warm2"] / med["olp-warm0"]
    lines += [
        "",
        f"- warm / cold: {ratio:.3f} (budget ≤ {RATIO_BUDGET}): "
        + ("PASS" if ratio <= RATIO_BUDGET else "FAIL"),
        _overhead_line("warm", results.ttft_ms["olp-warm2"], results.ttft_ms["direct-warm"]),
        _overhead_line("cold", results.ttft_ms["olp-warm0"], results.ttft_ms["direct"]),
    ]
    if results.hits_misses is not None:
        hits, misses = results.hits_misses
        lines.append(f"- olp-warm2 pool: {hits} hits, {misses} misses")
    if results.waiting_rss_mib:
        rss = ", ".join(f"{m:.0f}" for m in sorted(results.waiting_rss_mib))
        lines.append(f"- RSS of each waiting claude process: {rss} MiB")
    return "\n".join(lines + results.notes) + "\n"


def _overhead_line(kind: str, olp: list[float], direct: list[float]) -> str:
    diffs = [o - d for o, d in zip(olp, direct, strict=True)]
    overhead = statistics.median(olp) - statistics.median(direct)
    return (
        f"- OLP over the CLI run directly, {kind}: {overhead:+.0f} ms between the medians "
        f"(per round: median {statistics.median(diffs):+.0f} ms, from {min(diffs):+.0f} "
        f"to {max(diffs):+.0f}; budget ≤ {OVERHEAD_BUDGET_MS:g} ms): " + _overhead_verdict(diffs)
    )


def _overhead_verdict(diffs: list[float]) -> str:
    """PASS/FAIL when every round agrees; otherwise the spread of a cold start hides it."""
    if max(diffs) <= OVERHEAD_BUDGET_MS:
        return "PASS"
    if min(diffs) > OVERHEAD_BUDGET_MS:
        return "FAIL"
    verdict = "PASS" if statistics.median(diffs) <= OVERHEAD_BUDGET_MS else "FAIL"
    return f"INCONCLUSIVE (the median says {verdict})"


R = TypeVar("R")


@dataclass(frozen=True)
class CliBench(Generic[R]):
    """A benchmark of the CLI section, run from the command line by `main()`: `run(rounds,
    settle_s, claude)` measures, `render(results, claude, rounds, settle_s)` reports."""

    prog: str
    doc: str | None
    rounds: int
    settle_s: float
    quick: tuple[int, float]  # rounds and settle of `--quick`
    run: Callable[[int, float, str], R]
    render: Callable[[R, str, int, float], str]

    def parse_args(self, argv: list[str]) -> argparse.Namespace:
        rounds, settle = self.quick
        parser = argparse.ArgumentParser(prog=f"python -m {self.prog}", description=self.doc)
        parser.add_argument(
            "--rounds", type=int, default=self.rounds, help="rounds (each row once)"
        )
        parser.add_argument(
            "--settle", type=float, default=self.settle_s, help="quiet seconds before each"
        )
        parser.add_argument("--claude", help="the claude executable (default: the tests' install)")
        parser.add_argument("--out", type=Path, help="also write the report here")
        parser.add_argument(
            "--quick", action="store_true", help=f"{rounds} rounds, {settle:g} s settle"
        )
        args = parser.parse_args(argv)
        if args.quick:
            args.rounds, args.settle = rounds, settle
        return args

    def main(self, argv: list[str] | None = None) -> None:
        args = self.parse_args(sys.argv[1:] if argv is None else argv)
        procs.stop_children_on_sigterm()
        claude = find_claude(args.claude)
        results = self.run(args.rounds, args.settle, claude)
        report = self.render(results, claude, args.rounds, args.settle)
        if args.out is not None:
            args.out.write_text(report)
        print(report)


BENCH = CliBench(
    "bench.cli_warm", __doc__, rounds=7, settle_s=3.0, quick=(3, 2.0), run=run, render=render
)
main = BENCH.main


if __name__ == "__main__":
    main()
