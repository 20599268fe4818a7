"""The CLI section's client-tools line: what the MCP bridge adds to time to first token.

    python -m bench.cli_tools [--rounds 40] [--settle 1] [--claude PATH] [--out FILE]
    python -m bench.run --cli            # after bench.cli_warm

One `olp start` with `"warm": 0` for the real claude CLI (the CLI of `bench.cli_warm`),
against this benchmark's fake upstream, which answers every Messages request with text,
never with a tool call. Two rows, each measured once a round, the order swapped every
round:

- **olp-no-tools**: a streamed chat request; time from sending it to the first SSE frame
  with text;
- **olp-tools**: the identical request with one client tool (`tool_choice: "auto"`): OLP
  serves it to the CLI over its MCP bridge, and the CLI connects to the bridge and lists the
  tool before it asks the upstream. The model answers with text, so the first text is
  still the first token.

A request with tools always starts its CLI (a waiting CLI cannot take an MCP config), so
the rows differ by the bridge alone. A cold start varies by hundreds of milliseconds from
one run to the next, far more than the bridge costs: the line reads the per-round
differences (tools − no tools), not two medians. Line: bridge adds ≤ 50 ms to TTFT, read
at the median of the differences with its 95 % distribution-free interval
(`bench.stats.median_interval`): PASS when the whole interval is under 50 ms, FAIL when
it is wholly over, else INCONCLUSIVE (more rounds narrow it).

An unmeasured first round checks that both rows answer with text, and that the upstream
saw the tool in the request with tools and none in the other: otherwise the tools row
would not be measuring the bridge.
"""

from __future__ import annotations

import argparse
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

OLP = "olp"
ROWS = ("olp-no-tools", "olp-tools")
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
_EXTRA: dict[str, dict[str, Any]] = {"olp-no-tools": {}, "olp-tools": TOOLS_REQUEST}


@dataclass
class Results:
    ttft_ms: dict[str, list[float]] = field(default_factory=lambda: {r: [] for r in ROWS})
    load: list[tuple[float, float, float]] = field(default_factory=list)  # at start, at end


def run(rounds: int, settle_s: float, claude: str) -> Results:
    results = Results(load=[os.getloadavg()])
    with tempfile.TemporaryDirectory(prefix="olp-bench-cli-tools-") as tmp:
        bench = cli_warm.Bench(Path(tmp), claude, {OLP: 0})
        try:
            bench.start()
            check_tools_reach_upstream(bench, settle_s)
            for i in range(rounds):
                for row in ROWS if i % 2 == 0 else reversed(ROWS):
                    settle(bench, settle_s)
                    results.ttft_ms[row].append(bench.through_olp(OLP, _EXTRA[row]))
                print(
                    f"round {i + 1}/{rounds}: "
                    + ", ".join(f"{r} {results.ttft_ms[r][-1]:.0f} ms" for r in ROWS),
                    file=sys.stderr,
                )
        finally:
            bench.stop()
    results.load.append(os.getloadavg())
    return results


def check_tools_reach_upstream(bench: cli_warm.Bench, settle_s: float) -> None:
    """Both rows answer with text; only the tools row's CLI offers the tool upstream."""
    expected = TOOL_PREFIX + TOOL_NAME
    tools_seen(bench)  # forget anything earlier
    for row in ROWS:
        settle(bench, settle_s)
        bench.through_olp(OLP, _EXTRA[row])
        seen = tools_seen(bench)
        if (expected in seen) != (row == "olp-tools"):
            raise RuntimeError(f"{row}: the upstream was offered the tools {seen}")


def tools_seen(bench: cli_warm.Bench) -> list[str]:
    """The tools the fake upstream's Messages requests offered since it was last asked."""
    status, body = procs.http("GET", bench.upstream + "/bench/tools")
    if status != 200:
        raise RuntimeError(f"fake upstream: HTTP {status} on /bench/tools")
    names: list[str] = json.loads(body)
    return names


def settle(bench: cli_warm.Bench, seconds: float) -> None:
    """Until the previous request's CLI is gone, then `seconds` more."""
    deadline = time.monotonic() + 30
    while bench.children(OLP) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(seconds)


def render(results: Results, claude: str, rounds: int, settle_s: float) -> str:
    load = " → ".join(f"{one:.1f}" for one, _, _ in results.load)
    lines = [
        "## CLI: client tools through the MCP bridge (`python -m bench.cli_tools`)",
        "",
        f'claude CLI `{claude}`; `olp start` with `"warm": 0`; {rounds} rounds, '
        f"{settle_s:g} s settle; {os.cpu_count()} cores, load average {load} (1 min, "
        "start → end); fake upstream on 127.0.0.1 (answers with text; it saw the tool "
        "in the requests with tools only).",
        "",
        "| row | median ms | min | max |",
        "|---|---:|---:|---:|",
    ]
    for row in ROWS:
        values = results.ttft_ms[row]
        median = statistics.median(values)
        lines.append(f"| {row} | {median:.0f} | {min(values):.0f} | {max(values):.0f} |")
    with_tools, without = results.ttft_ms["olp-tools"], results.ttft_ms["olp-no-tools"]
    diffs = [t - n for t, n in zip(with_tools, without, strict=True)]
    lines += ["", bridge_line(diffs)]
    return "\n".join(lines) + "\n"


def bridge_line(diffs: Sequence[float]) -> str:
    """The line's text: the median paired difference, its interval and the verdict."""
    interval = median_interval(diffs)
    spread = (
        "no 95 % interval with so few rounds"
        if interval is None
        else f"95 % interval {interval[0]:+.0f} to {interval[1]:+.0f} ms"
    )
    return (
        f"- bridge adds ≤ {BUDGET_MS:g} ms to TTFT (median paired difference): "
        f"{statistics.median(diffs):+.0f} ms, {spread}, over {len(diffs)} rounds: "
        + bridge_verdict(diffs)
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


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_tools", description=__doc__)
    parser.add_argument("--rounds", type=int, default=40, help="rounds (each row once)")
    parser.add_argument("--settle", type=float, default=1.0, help="quiet seconds before each")
    parser.add_argument("--claude", help="the claude executable (default: the tests' install)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--quick", action="store_true", help="8 rounds, 0.5 s settle")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.settle = 8, 0.5
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    procs.stop_children_on_sigterm()
    claude = cli_warm.find_claude(args.claude)
    report = render(run(args.rounds, args.settle, claude), claude, args.rounds, args.settle)
    if args.out is not None:
        args.out.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
