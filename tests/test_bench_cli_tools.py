"""The client-tools line of the benchmark's CLI section (bench/cli_tools.py): its verdict
rests on the interval around the median of the per-round differences, not on the median."""

from __future__ import annotations

from bench.cli_tools import BUDGET_MS, bridge_line, bridge_verdict


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
    line = bridge_line([-200.0, 10, 15, 20, 25, 30, 35, 40, 45, 900])
    assert line == (
        f"- bridge adds ≤ {BUDGET_MS:g} ms to TTFT (median paired difference): +28 ms, "
        "95 % interval +10 to +45 ms, over 10 rounds: PASS"
    )
