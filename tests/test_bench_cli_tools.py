"""The client-tools lines of the benchmark's CLI section (bench/cli_tools.py): the verdict
rests on the interval around the median of the per-round differences, not on the median,
and a warm row that found no process waiting makes it invalid."""

from __future__ import annotations

from bench.cli_tools import BUDGET_MS, ROWS, Results, bridge_line, bridge_verdict, render


def test_pass_when_the_whole_interval_is_under_the_budget() -> None:
    # 10 rounds: the 95 % interval runs from the 2nd to the 9th value (here 10 to 45 ms).
    diffs = [-200.0, 10, 15, 20, 25, 30, 35, 40, 45, 900]
    assert bridge_verdict(diffs) == "PASS"


def test_fail_when_the_whole_interval_is_over_the_budget() -> None:
    diffs = [-200.0, 60, 70, 80, 90, 100, 110, 120, 130, 900]
    assert bridge_verdict(diffs) == "FAIL"


def test_inconclusive_when_the_interval_spans_the_budget_even_if_the_median_is_under() -> None:
    diffs = [-200.0, 0, 5, 10, 15, 20, 25, 30, 55, 900]  # median 17.5 ms, interval 0 to 55
    assert bridge_verdict(diffs) == "INCONCLUSIVE"


def test_inconclusive_with_too_few_rounds_for_an_interval() -> None:
    assert bridge_verdict([1.0, 2, 3, 4, 5]) == "INCONCLUSIVE"  # 6 are needed at 95 %


def test_the_line_gives_the_median_difference_and_its_interval() -> None:
    diffs = [-200.0, 10, 15, 20, 25, 30, 35, 40, 45, 900]
    line = bridge_line(diffs, "started ahead", bridge_verdict(diffs))
    assert line == (
        f"- bridge adds ≤ {BUDGET_MS:g} ms to TTFT, started ahead (median paired "
        "difference): +28 ms, 95 % interval +10 to +45 ms, over 10 rounds: PASS"
    )


def results(warm_misses: int) -> Results:
    no_tools = [500.0, 510, 520, 530, 540, 550, 560, 570]
    ttft = {row: list(no_tools) for row in ROWS}
    ttft["warm-tools"] = [t + 10 for t in no_tools]
    ttft["cold-tools"] = [t + 90 for t in no_tools]
    return Results(ttft_ms=ttft, load=[(1.0, 1.0, 1.0)] * 2, warm_misses=warm_misses)


def test_the_warm_line_is_gated_and_the_cold_one_reported() -> None:
    report = render(results(0), "claude", 8, 1.0)
    assert "started ahead (median paired difference): +10 ms" in report
    assert "over 8 rounds: PASS" in report
    assert "cold start (the CLI's own connection) (median paired difference): +90 ms" in report
    assert report.count("reported") == 1


def test_a_warm_row_that_found_no_process_waiting_invalidates_the_line() -> None:
    report = render(results(1), "claude", 8, 1.0)
    assert "over 8 rounds: INVALID" in report
    assert "1 warm row(s) found no process waiting" in report
