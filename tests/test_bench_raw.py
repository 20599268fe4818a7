"""`python -m bench.run --from-raw`: a run's raw numbers render the very report the run wrote."""

from __future__ import annotations

from pathlib import Path

from bench.cells import Cell, RunInfo
from bench.loadgen import LoadResult
from bench.report import render
from bench.run import _read_raw, _write_raw, main


def load(rps: float, stream: bool = False, p50_ms: float = 1.5) -> LoadResult:
    return LoadResult(
        conns=64, procs=1, stream=stream, requests=int(rps), total_requests=int(rps) + 50,
        window_s=1.0, rps=rps, p50_ms=p50_ms, p99_ms=4.0, ttfb_p50_ms=1.2, non_2xx=0,
        errors={}, capped=False, loadgen_cpu_us_per_req=20.0,
    )  # fmt: skip


def cell(target: str, rps: float, proxy: str | None) -> Cell:
    cpu = {"upstream": 40.0, **({proxy: 150.0} if proxy else {})}
    rss = {"upstream": 40.0, **({proxy: 50.0} if proxy else {})}
    rounds = tuple(load(rps * f) for f in (0.9, 1.0, 1.1))
    return Cell(target, proxy, False, 64, rounds, cpu, rss, 0.01)


def test_a_report_renders_again_from_its_raw_numbers(tmp_path: Path) -> None:
    info = RunInfo(
        date="2026-11-30 17:00 UTC", command="python -m bench.run", cores=2, cpu_model="cpu",
        kernel="6.1", python="3.11.7", versions={"olp": "0.1.0"}, warmup_s=0.3,
        duration_s=5.0, rounds=3, loadgen_procs=1, pair_rounds=3,
        legend=[("direct", "the upstream"), ("olp", "OLP")], notes=["the run took 1 s"],
    )  # fmt: skip
    cells = [cell("direct", 30_000.0, None), cell("passthrough", 8_000.0, "passthrough")]
    cells.append(cell("olp", 5_500.0, "olp"))
    _write_raw(tmp_path, info, cells)
    [raw] = tmp_path.glob("*.json")
    assert render(*_read_raw(raw)) == render(info, cells)

    out = tmp_path / "perf.md"
    main(["--from-raw", str(raw), "--out", str(out)])
    assert out.read_text() == render(info, cells)
    assert "3.75× the fastest proxy" in out.read_text()  # 30,000 / 8,000, two decimals


def test_the_report_gives_what_a_miss_and_a_member_key_add_to_one_request() -> None:
    info = RunInfo(
        date="2026-11-30 17:00 UTC", command="python -m bench.run", cores=2, cpu_model="cpu",
        kernel="6.1", python="3.11.7", versions={}, warmup_s=0.3, duration_s=5.0, rounds=3,
        loadgen_procs=1, pair_rounds=3,
    )  # fmt: skip

    def one_conn(target: str, p50s: tuple[float, ...]) -> Cell:
        rounds = tuple(load(2_000.0, p50_ms=p) for p in p50s)
        return Cell(target, target, False, 1, rounds, {"upstream": 1.0, target: 1.0},
                    {"upstream": 1.0, target: 1.0}, 0.0)  # fmt: skip

    cells = [
        one_conn("olp-miss", (0.40, 0.45, 0.41)),  # median 0.41 ms
        one_conn("olp-distinct", (0.37, 0.36, 0.50)),  # median 0.37 ms
        one_conn("olp-member", (0.38, 0.38, 0.38)),
        one_conn("olp-bare", (0.37, 0.37, 0.37)),
    ]
    report = render(info, cells)
    miss = "| cache miss (`olp-miss` vs `olp-distinct`) | non-streaming | 0.41 | 0.37 | +40 µs |"
    member = "| member key + ledger (`olp-member` vs `olp-bare`) | non-streaming | 0.38 | 0.37 "
    assert miss in report
    assert member + "| +10 µs |" in report
    # Without the 1-connection rows (an older run), the section is left out.
    assert "added at p50" not in render(info, [])


def test_a_cost_line_read_over_pairs_of_processes_says_so_and_survives_its_raw_numbers(
    tmp_path: Path,
) -> None:
    info = RunInfo(
        date="2026-12-01 22:00 UTC", command="python -m bench.run", cores=2, cpu_model="cpu",
        kernel="6.1", python="3.11.7", versions={}, warmup_s=0.3, duration_s=5.0, rounds=2,
        loadgen_procs=1, pair_rounds=12, pair_blocks=6,
    )  # fmt: skip
    blocks = tuple(i // 2 for i in range(12))
    cpu = {"upstream": 40.0, "olp-miss": 150.0, "olp-distinct": 130.0}
    rss = {"upstream": 40.0, "olp-miss": 50.0, "olp-distinct": 50.0}
    base = tuple(load(1_000.0 + 10 * i) for i in range(12))
    # Each pair of processes measures its own cost: 2 % for the first, 4, 6, ... 12 %.
    miss = tuple(load(r.rps * (0.98 - 0.02 * b)) for r, b in zip(base, blocks, strict=True))
    cells = [
        Cell("olp-distinct", "olp-distinct", False, 64, base, cpu, rss, 0.0, blocks),
        Cell("olp-miss", "olp-miss", False, 64, miss, cpu, rss, 0.0, blocks),
    ]
    report = render(info, cells)
    interval = "95% interval 2.0% to 12.0%, 12 paired rounds on 6 pairs of processes"
    assert f"cost 7.0% ({interval})" in report
    _write_raw(tmp_path, info, cells)
    [raw] = tmp_path.glob("*.json")
    assert _read_raw(raw) == (info, cells)
