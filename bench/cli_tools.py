"""The CLI section's client-tools lines: what the MCP bridge adds to time to first token.

    python -m bench.cli_tools [--rounds 30] [--settle 1] [--claude PATH] [--out FILE]
    python -m bench.run --cli            # after bench.cli_warm

Two `olp start`s for the real claude CLI (the CLI of `bench.cli_warm`), against this
benchmark's fake upstream, which answers every Messages request with text, never with a
tool call: **warm** with `"warm": 2` (claude's CLI is started ahead by default; two, so
that a process waits for requests with tools and one for requests without) and **cold**
with `"warm": 0`. Each gets the same two requests, each measured once a round, in an
order swapped every round:

- **no-tools**: a streamed chat request; time from sending it to the first SSE frame with
  text;
- **tools**: the identical request with one client tool (`tool_choice: "auto"`): OLP
  serves it to the CLI over its MCP bridge. The model answers with text, so the first
  text is still the first token.

A CLI started ahead for requests with tools has connected to its bridge endpoint and
listed no tools; the request's are bound to it, it lists them again, and only then is
it given the prompt. A cold CLI connects to the bridge and lists the tools after its own
start-up, before it asks the upstream. Before each measurement the run waits until the
warm olp has both its processes waiting and every CLI is idle, then `--settle` seconds.

Lines, each read on the per-round differences (tools − no tools; a start varies by far
more than the bridge costs), at the median with its 95 % distribution-free interval
(`bench.stats.median_interval`):

- bridge adds ≤ 50 ms to TTFT, started ahead: PASS when the whole interval is under
  50 ms, FAIL when it is wholly over, else INCONCLUSIVE (more rounds narrow it); a warm
  row that found no process waiting makes it INVALID;
- the same for a cold start, reported: it is the CLI's own MCP connection.

Two unmeasured first rounds check that every row answers with text, and that the upstream
saw the tool in the requests with tools and none in the others (otherwise the tools rows
would not be measuring the bridge); they also fill the warm pool with a process for each
kind of request.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olp.providers.claude_cli.translate import TOOL_PREFIX

from bench import cli_warm, procs
from bench.stats import median_interval

OLPS = {"warm": 2, "cold": 0}
REQUESTS = ("no-tools", "tools")
ROWS = tuple(f"{olp}-{request}" for olp in OLPS for request in REQUESTS)
BUDGET_MS = 50.0
TOOL_NAME = "get_weather"
TOOLS_REQUEST: dict[str, Any] = {
    "tools": [
        {
            "type": "function",
            "function": {
                "name": TOOL_NAME,
                "description": "The current weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ],
    "tool_choice": "auto",
}
_EXTRA: dict[str, dict[str, Any]] = {"no-tools": {}, "tools": TOOLS_REQUEST}


@dataclass
class Results:
    ttft_ms: dict[str, list[float]] = field(default_factory=lambda: {r: [] for r in ROWS})
    load: list[tuple[float, float, float]] = field(default_factory=list)  # at start, at end
    # Measured warm rows that found no process waiting for them.
    warm_misses: int = 0


def run(rounds: int, settle_s: float, claude: str) -> Results:
    results = Results(load=[os.getloadavg()])
    with tempfile.TemporaryDirectory(prefix="olp-bench-cli-tools-") as tmp:
        bench = cli_warm.Bench(Path(tmp), claude, OLPS)
        try:
            bench.start()
            check_tools_reach_upstream(bench, settle_s)
            for i in range(rounds):
                for row in ROWS if i % 2 == 0 else reversed(ROWS):
                    settle(bench, settle_s)
                    results.warm_misses += measure(bench, row, results)
                print(
                    f"round {i + 1}/{rounds}: "
                    + ", ".join(f"{r} {results.ttft_ms[r][-1]:.0f} ms" for r in ROWS),
                    file=sys.stderr,
                )
        finally:
            bench.stop()
    results.load.append(os.getloadavg())
    return results


def measure(bench: cli_warm.Bench, row: str, results: Results) -> int:
    """Measure `row` into `results`; 1 if it was a warm row that found no process waiting."""
    olp, request = row.split("-", 1)
    before = bench.warm_stats("warm") if olp == "warm" else None
    results.ttft_ms[row].append(bench.through_olp(olp, _EXTRA[request]))
    after = bench.warm_stats("warm") if olp == "warm" else None
    if before is None or after is None:
        return 0
    return int(after["misses"] > before["misses"])


def check_tools_reach_upstream(bench: cli_warm.Bench, settle_s: float) -> None:
    """Every row answers with text; only the tools rows' CLIs offer the tool upstream.
    Twice: the warm pool starts a process for a kind of request at its second request."""
    expected = TOOL_PREFIX + TOOL_NAME
    tools_seen(bench)  # forget anything earlier
    for row in ROWS * 2:
        olp, request = row.split("-", 1)
        settle(bench, settle_s)
        bench.through_olp(olp, _EXTRA[request])
        seen = tools_seen(bench)
        if (expected in seen) != (request == "tools"):
            raise RuntimeError(f"{row}: the upstream was offered the tools {seen}")


def tools_seen(bench: cli_warm.Bench) -> list[str]:
    """The tools the fake upstream's Messages requests offered since it was last asked."""
    status, body = procs.http("GET", bench.upstream + "/bench/tools")
    if status != 200:
        raise RuntimeError(f"fake upstream: HTTP {status} on /bench/tools")
    names: list[str] = json.loads(body)
    return names


def settle(bench: cli_warm.Bench, seconds: float) -> None:
    """Until the cold olp's last CLI is gone, the warm olp has both its processes waiting
    and every CLI is idle, then `seconds` more."""
    deadline = time.monotonic() + 30
    while bench.children("cold") and time.monotonic() < deadline:
        time.sleep(0.05)
    bench.settle(seconds, pool="warm")


def render(results: Results, claude: str, rounds: int, settle_s: float) -> str:
    load = " → ".join(f"{one:.1f}" for one, _, _ in results.load)
    lines = [
        "## CLI: client tools through the MCP bridge (`python -m bench.cli_tools`)",
        "",
        f'claude CLI `{claude}`; `olp start` with `"warm": 2` (warm) and `"warm": 0` '
        f"(cold); {rounds} rounds, {settle_s:g} s settle; {os.cpu_count()} cores, load "
        f"average {load} (1 min, start → end); fake upstream on 127.0.0.1 (answers with "
        "text; it saw the tool in the requests with tools only).",
        "",
        "| row | median ms | min | max |",
        "|---|---:|---:|---:|",
    ]
    for row in ROWS:
        values = results.ttft_ms[row]
        median = statistics.median(values)
        lines.append(f"| {row} | {median:.0f} | {min(values):.0f} | {max(values):.0f} |")
    warm = differences(results, "warm")
    verdict = "INVALID" if results.warm_misses else bridge_verdict(warm)
    lines += [
        "",
        bridge_line(warm, "started ahead", verdict),
        bridge_line(
            differences(results, "cold"), "cold start (the CLI's own connection)", "reported"
        ),
    ]
    if results.warm_misses:
        lines.append(f"- {results.warm_misses} warm row(s) found no process waiting")
    return "\n".join(lines) + "\n"


def differences(results: Results, olp: str) -> list[float]:
    """Per round: the tools row's TTFT minus the no-tools row's, on olp `olp`."""
    with_tools, without = results.ttft_ms[f"{olp}-tools"], results.ttft_ms[f"{olp}-no-tools"]
    return [t - n for t, n in zip(with_tools, without, strict=True)]


def bridge_line(diffs: Sequence[float], what: str, verdict: str) -> str:
    """The line's text: the median paired difference, its interval and the verdict."""
    interval = median_interval(diffs)
    spread = (
        "no 95 % interval with so few rounds"
        if interval is None
        else f"95 % interval {interval[0]:+.0f} to {interval[1]:+.0f} ms"
    )
    return (
        f"- bridge adds ≤ {BUDGET_MS:g} ms to TTFT, {what} (median paired difference): "
        f"{statistics.median(diffs):+.0f} ms, {spread}, over {len(diffs)} rounds: {verdict}"
    )


def bridge_verdict(diffs: Sequence[float]) -> str:
    """PASS: the whole interval is under the budget; FAIL: all of it is over; else
    INCONCLUSIVE, also when there are too few rounds for an interval."""
    interval = median_interval(diffs)
    if interval is None:
        return "INCONCLUSIVE"
    low, high = interval
    if high < BUDGET_MS:
        return "PASS"
    if low > BUDGET_MS:
        return "FAIL"
    return "INCONCLUSIVE"


BENCH = cli_warm.CliBench(
    "bench.cli_tools", __doc__, rounds=30, settle_s=1.0, quick=(8, 0.5), run=run, render=render
)
main = BENCH.main


if __name__ == "__main__":
    main()
