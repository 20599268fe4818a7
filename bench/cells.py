"""What a run measured, as the report reads it: one Cell per (row, mode, connections).

Shared by the report (`bench.report`) and the issue lines (`bench.issue_lines`), with the
few formatting helpers both use.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from bench.loadgen import LoadResult

__all__ = ["Cell", "RunInfo", "find", "fmt_ms", "fmt_num", "mode", "verdict"]


@dataclass(frozen=True, slots=True)
class Cell:
    """One (target, mode, connections) measurement: several short rounds, summarized.

    Latency and throughput are medians over the rounds: on a shared machine a burst of
    outside load spoils a round or two, and the median sets those aside.
    """

    target: str  # the row
    proxy: str | None  # the server in front of the upstream (its CPU and RSS); None: direct
    stream: bool
    conns: int
    rounds: tuple[LoadResult, ...]
    cpu_us_per_req: dict[str, float]  # server name -> CPU µs per completed request
    rss_mib: dict[str, float]  # server name -> largest resident memory after a round
    other_load: float  # share of the machine's CPU used outside this run during the cell
    # Per round, which of its server's processes served it (0: the first; a cost line's
    # pair is restarted between blocks of rounds, `bench.run --pair-blocks`).
    blocks: tuple[int, ...] = ()

    def _median(self, metric: str) -> float:
        values = [v for r in self.rounds if not math.isnan(v := float(getattr(r, metric)))]
        return statistics.median(values) if values else math.nan

    @property
    def rps(self) -> float:
        return self._median("rps")

    @property
    def rps_range(self) -> tuple[float, float]:
        values = [r.rps for r in self.rounds]
        return min(values), max(values)

    @property
    def p50_ms(self) -> float:
        return self._median("p50_ms")

    @property
    def p99_ms(self) -> float:
        return self._median("p99_ms")

    @property
    def ttfb_p50_ms(self) -> float:
        return self._median("ttfb_p50_ms")

    @property
    def loadgen_cpu_us_per_req(self) -> float:
        return self._median("loadgen_cpu_us_per_req")

    @property
    def capped(self) -> bool:
        return any(r.capped for r in self.rounds)

    @property
    def errors(self) -> int:
        return sum(r.non_2xx + sum(r.errors.values()) for r in self.rounds)

    def error_detail(self) -> str:
        reasons: dict[str, int] = {}
        for r in self.rounds:
            if r.non_2xx:
                reasons["non-2xx"] = reasons.get("non-2xx", 0) + r.non_2xx
            for reason, n in r.errors.items():
                reasons[reason] = reasons.get(reason, 0) + n
        return ", ".join(f"{n} × {reason}" for reason, n in reasons.items())


@dataclass(slots=True)
class RunInfo:
    date: str
    command: str
    cores: int
    cpu_model: str
    kernel: str
    python: str
    versions: dict[str, str]
    warmup_s: float
    duration_s: float
    rounds: int
    loadgen_procs: int
    pair_rounds: int  # rounds of each cost line's pair (its own extra rounds included)
    # Pairs of fresh server processes those rounds are spread over (`--pair-blocks`).
    pair_blocks: int = 1
    notes: list[str] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)  # row -> what it measures
    # GET /cache/stats totals of the cache variants after the run (hits, misses, …).
    cache_stats: dict[str, dict[str, int]] = field(default_factory=dict)
    # Request rows in each variant's ledger after it stopped, and the responses it sent.
    ledger_rows: dict[str, int] = field(default_factory=dict)
    answered: dict[str, int] = field(default_factory=dict)


def mode(stream: bool) -> str:
    return "streaming" if stream else "non-streaming"


def find(cells: list[Cell], target: str, stream: bool, conns: int) -> Cell | None:
    for c in cells:
        if (c.target, c.stream, c.conns) == (target, stream, conns):
            return c
    return None


def fmt_ms(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.3g}" if x < 100 else f"{x:.0f}"


def fmt_num(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:,.0f}"


def verdict(ok: bool | None, *cells: Cell, invalid: str | None = None) -> str:
    """`ok` None: the measurement could not tell (a cost whose interval spans the budget)."""
    if any(c.errors for c in cells):
        return "INVALID (errors)"
    if invalid:
        return f"INVALID ({invalid})"
    if ok is None:
        return "**INCONCLUSIVE** (the interval spans the budget)"
    return "**PASS**" if ok else "**FAIL**"
