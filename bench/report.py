"""The markdown report: machine, budget verdicts, generator check, the full table.

The general budget thresholds live here; the issues' own are in `bench.issue_lines`.
docs/design.md §9 gives reference points (a minimal passthrough adds ~0.4 ms at p50;
LiteLLM adds ~12 ms and does ~1/80 of the passthrough's throughput) and the rule "OLP
must stay close to the passthrough"; the numbers below are this benchmark's reading of
"close".
"""

from __future__ import annotations

import math

from bench.cells import Cell, RunInfo, find, fmt_ms, fmt_num, mode, verdict
from bench.issue_lines import HIT, added_latency_lines, checks, issue_budget_lines
from bench.stats import CONFIDENCE

# OLP's p50 latency minus the upstream's own, at 1 connection: the passthrough's ~0.4 ms
# plus 0.6 ms for OLP's real work (auth, routing, JSON in and out).
OVERHEAD_P50_MAX_MS = 1.0
# OLP's throughput at 64 connections as a fraction of the passthrough's, on the same cores.
THROUGHPUT_MIN_FRACTION = 0.5
# A cell during which processes outside the run used more of the machine than this is noisy.
NOISY_OTHER_LOAD = 0.10
# Direct must beat every proxy by this factor at 64 connections, or the proxy numbers may
# be capped by the generator (or the upstream) rather than by the proxy.
GENERATOR_HEADROOM = 1.5

TARGETS = ("direct", "passthrough", "olp")


def budget_lines(cells: list[Cell]) -> list[str]:
    rows = [
        "| budget line | mode | measured | passthrough, for scale | budget | result |",
        "|---|---|---|---|---|---|",
    ]
    for stream in (False, True):
        direct, pt, olp = (find(cells, t, stream, 1) for t in TARGETS)
        measured, scale, result = "not measured", "—", "not measured"
        if direct and pt:
            scale = f"+{pt.p50_ms - direct.p50_ms:.3f} ms"
        if direct and olp:
            over = olp.p50_ms - direct.p50_ms
            measured = f"+{over:.3f} ms ({fmt_ms(olp.p50_ms)} vs {fmt_ms(direct.p50_ms)})"
            result = verdict(over <= OVERHEAD_P50_MAX_MS, direct, olp)
        rows.append(
            f"| OLP p50 latency overhead vs direct, 1 connection | {mode(stream)} | {measured} "
            f"| {scale} | ≤ {OVERHEAD_P50_MAX_MS} ms | {result} |"
        )
    for stream in (False, True):
        pt, olp = find(cells, "passthrough", stream, 64), find(cells, "olp", stream, 64)
        measured, scale, result = "not measured", "—", "not measured"
        if pt:
            scale = f"{fmt_num(pt.rps)} req/s"
        if pt and olp:
            frac = olp.rps / pt.rps if pt.rps else math.nan
            measured = f"{frac:.2f} ({fmt_num(olp.rps)} req/s)"
            result = verdict(frac >= THROUGHPUT_MIN_FRACTION, pt, olp)
        rows.append(
            f"| OLP throughput / passthrough, 64 connections | {mode(stream)} | {measured} "
            f"| {scale} | ≥ {THROUGHPUT_MIN_FRACTION} | {result} |"
        )
    return rows


def generator_check(cells: list[Cell]) -> list[str]:
    lines = []
    for stream in (False, True):
        direct = find(cells, "direct", stream, 64)
        proxies = [c for t in ("passthrough", "olp") if (c := find(cells, t, stream, 64))]
        if direct is None or not proxies:
            continue
        best = max(proxies, key=lambda c: c.rps)
        ratio = direct.rps / best.rps if best.rps else math.inf
        ok = ratio >= GENERATOR_HEADROOM
        caveat = (
            ""
            if ok
            else (
                "; the generator may be what limits that proxy: its figure is then a lower "
                "bound, and a ratio against it too high"
            )
        )
        lg_us = direct.loadgen_cpu_us_per_req
        lines.append(
            f"- {mode(stream)}, 64 connections: the generator drove the upstream directly at "
            f"{fmt_num(direct.rps)} req/s, {ratio:.2f}× the fastest proxy "
            f"({best.target}, {fmt_num(best.rps)} req/s) — "
            f"{'**PASS**' if ok else '**FAIL**'} (needs ≥ {GENERATOR_HEADROOM}×{caveat}). "
            f"It spent {lg_us:.0f} µs of CPU per request there, "
            f"{direct.rps * lg_us / 1e4:.0f}% of one core."
        )
    for stream in (False, True):
        direct, hit = find(cells, "direct", stream, 64), find(cells, HIT, stream, 64)
        if direct is None or hit is None:
            continue
        ratio = direct.rps / hit.rps if hit.rps else math.inf
        lines.append(
            f"- {mode(stream)}, 64 connections, cache hits: the upstream directly went "
            f"{ratio:.2f}× as fast as `{HIT}` ({fmt_num(hit.rps)} req/s)"
            + (
                "."
                if ratio >= GENERATOR_HEADROOM
                else f" — under {GENERATOR_HEADROOM}×: the generator may be what limits "
                f"`{HIT}`, so its figure is a lower bound (a PASS stands, a FAIL is "
                "inconclusive)."
            )
        )
    proxied = [c for c in cells if c.target != "direct"]
    if proxied:
        top = max(proxied, key=lambda c: c.rps * c.loadgen_cpu_us_per_req)
        lines.append(
            f"- Against the proxies the generator never used more than "
            f"{top.rps * top.loadgen_cpu_us_per_req / 1e4:.0f}% of one core "
            f"({top.target}, {mode(top.stream)}, {top.conns} connections)."
        )
    return lines


def results_table(cells: list[Cell]) -> list[str]:
    rows = [
        "| target | mode | conns | req/s | req/s range | p50 ms | p99 ms | p50 TTFB ms | errors "
        "| proxy CPU µs/req | upstream CPU µs/req | loadgen CPU µs/req "
        "| proxy RSS MiB | upstream RSS MiB | other load |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for c in cells:
        proxy = c.proxy
        low, high = c.rps_range
        flag = " (capped)" if c.capped else ""
        rows.append(
            f"| {c.target} | {mode(c.stream)} | {c.conns} | {fmt_num(c.rps)}{flag} "
            f"| {fmt_num(low)}–{fmt_num(high)} "
            f"| {fmt_ms(c.p50_ms)} | {fmt_ms(c.p99_ms)} | {fmt_ms(c.ttfb_p50_ms)} | {c.errors} "
            f"| {fmt_num(c.cpu_us_per_req[proxy]) if proxy else '—'} "
            f"| {fmt_num(c.cpu_us_per_req['upstream'])} | {fmt_num(c.loadgen_cpu_us_per_req)} "
            f"| {f'{c.rss_mib[proxy]:.1f}' if proxy else '—'} | {c.rss_mib['upstream']:.1f} "
            f"| {c.other_load:.0%}{' ⚠' if c.other_load > NOISY_OTHER_LOAD else ''} |"
        )
    return rows


def render(info: RunInfo, cells: list[Cell]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in info.versions.items())
    errors = [
        f"- {c.target} {mode(c.stream)} {c.conns} conns: {c.error_detail()}"
        for c in cells
        if c.errors
    ]
    out = [
        "# OLP performance",
        "",
        f"Generated by `{info.command}` on {info.date}; do not edit by hand "
        "(see [bench/README.md](../bench/README.md)).",
        "",
        f"- Machine: {info.cores} cores ({info.cpu_model}), Linux {info.kernel}, "
        f"Python {info.python}; {versions}.",
        f"- Each cell: {info.rounds} round(s) of {info.warmup_s:g} s warm-up + "
        f"{info.duration_s / info.rounds:g} s measured (the cost lines' rows: "
        f"{info.pair_rounds} rounds), targets interleaved round by round; "
        f"closed loop, keep-alive connections, {info.loadgen_procs} generator process(es).",
        "- Everything (generator, upstream, proxy) shares the same cores: read throughput as "
        "relative, side by side, not as what a dedicated host would do.",
        "",
        "## Budget (docs/design.md §9)",
        "",
        "Reference points (docs/design.md §9): a minimal passthrough does ~6,500 req/s "
        "non-streaming and ~6,000 streams/s at 64 connections on 2 cores, adding ~0.4 ms "
        "at p50; LiteLLM 1.110 does ~80 req/s and ~30 streams/s, adding ~12 ms. OLP must "
        "stay close to the passthrough.",
        "",
        *budget_lines(cells),
        "",
        "### Cache (issue 5), keys and ledger (issue 4)",
        "",
        "A cost line compares a row with its baseline round by round: both ran in the same "
        f"rounds, and each cost line's pair ran {info.pair_rounds} rounds (the extra ones "
        "back to back, alternating which goes first). The cost is 1 − the median of the "
        "per-round ratios (row's req/s / baseline's req/s), given with the "
        f"{CONFIDENCE:.0%} interval of that median (order statistics, no distribution "
        "assumed). "
        + _blocks_text(info.pair_blocks)
        + "**PASS**: the whole interval is under the budget; **FAIL**: the whole "
        "interval is at or over it; **INCONCLUSIVE**: the interval spans it, and this "
        "machine was too noisy to tell. OLP's CPU per request, which does not depend on how "
        "the cores were shared, is given beside it as a cross-check. The new rows run only "
        "at the connection counts these lines read: 1 and 64 connections.",
        "",
        *issue_budget_lines(cells, info),
        "",
        *_added_latency(cells),
        *(checks(info) or ["- comparison checks not run (no OLP variants)"]),
        "",
        "## Generator check",
        "",
        *(generator_check(cells) or ["- not run (needs direct and a proxy at 64 connections)"]),
        "",
        "## Results",
        "",
        *(["| row | what it measures |", "|---|---|"] if info.legend else []),
        *(f"| {name} | {about} |" for name, about in info.legend),
        *([""] if info.legend else []),
        *results_table(cells),
        "",
        "- **req/s**: responses completed in the measured window / its length; the median "
        "over the rounds, and the **range** of the rounds.",
        "- **p50/p99 ms**: request written → last byte of the response read (median over "
        "the rounds of each round's percentile).",
        "- **p50 TTFB ms**: request written → first byte (non-streaming), or → first SSE frame "
        "carrying text (streaming).",
        "- **errors**: non-2xx responses plus transport or framing errors, warm-up included; "
        "any non-zero value makes that row invalid.",
        "- **CPU µs/req**: CPU time the process used during the cell (warm-up included) / "
        "requests it completed — the cost that does not depend on how cores are shared.",
        "- **RSS**: resident memory after the cell.",
        "- **other load**: share of the machine's CPU used by processes outside this run "
        f"(other tenants, VM steal) during the cell; ⚠ above {NOISY_OTHER_LOAD:.0%}, "
        "where that row's throughput and tail latency are unreliable.",
    ]
    if errors:
        out += ["", "## Errors", "", *errors]
    if info.notes:
        out += ["", "## Notes", "", *(f"- {n}" for n in info.notes)]
    return "\n".join(out) + "\n"


def _blocks_text(blocks: int) -> str:
    if blocks <= 1:
        return ""
    return (
        f"Those rounds ran on {blocks} pairs of processes, both servers restarted between "
        "blocks of rounds: two processes of the same code serve at steadily different "
        "speeds, so each pair's median ratio is one sample, and the cost and its interval "
        "are read over the pairs. "
    )


def _added_latency(cells: list[Cell]) -> list[str]:
    lines = added_latency_lines(cells)
    if not lines:
        return []
    intro = (
        "For scale, what one request waits for them, alone on its connection (1 connection, "
        "p50; not a budget line: the lines above are about throughput under load):"
    )
    return [intro, "", *lines, ""]
