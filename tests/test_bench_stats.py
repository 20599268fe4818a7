"""The benchmark's cost statistics (bench/stats.py): the numbers its verdicts rest on."""

from __future__ import annotations

import math

import pytest

from bench.stats import median_interval, paired_cost


@pytest.mark.parametrize(
    ("n", "ranks"),
    # Textbook 95 % order-statistic intervals for the median (1-based ranks).
    [(5, None), (6, (1, 6)), (10, (2, 9)), (20, (6, 15)), (30, (10, 21)), (40, (14, 27))],
)
def test_median_interval_takes_the_binomial_ranks(n: int, ranks: tuple[int, int] | None) -> None:
    values = [float(i) for i in range(n, 0, -1)]  # unsorted on purpose
    assert median_interval(values) == ranks


def test_paired_cost_pairs_round_by_round() -> None:
    # Each round the row ran at 95 % of its baseline, while the machine's speed swung by
    # half: the pairing sees a steady 5 %, where comparing medians would not.
    bases = [1000.0, 2000.0, 1500.0, 900.0, 1800.0, 1200.0, 1100.0, 1700.0]
    rows = [b * 0.95 for b in bases]
    result = paired_cost(rows, bases)
    assert result.pairs == 8
    assert result.cost == pytest.approx(0.05)
    assert result.low == pytest.approx(0.05) and result.high == pytest.approx(0.05)
    assert result.verdict(0.10) is True


def test_verdict_is_undecided_while_the_interval_spans_the_budget() -> None:
    bases = [1000.0] * 10
    spread = paired_cost([860.0, 870, 910, 920, 930, 940, 950, 960, 980, 990], bases)
    assert spread.low is not None and spread.high is not None
    assert spread.low < 0.10 < spread.high
    assert spread.verdict(0.10) is None
    assert paired_cost([850.0] * 10, bases).verdict(0.10) is False


def test_too_few_rounds_fall_back_to_the_median() -> None:
    result = paired_cost([950.0, 800.0], [1000.0, 1000.0])
    assert (result.low, result.high) == (None, None)
    assert result.cost == pytest.approx(0.125)
    assert result.verdict(0.10) is False
    assert math.isnan(paired_cost([], []).cost)


def test_with_several_pairs_of_processes_each_pair_is_one_sample() -> None:
    # Six pairs of processes, five rounds each; each pair measured its own steady cost
    # (3 to 15 %). Taken round by round, the 30 rounds would claim an interval of 5-12 %;
    # read over the pairs, the interval is as wide as the pairs disagree.
    block_ratios = [0.95, 0.92, 0.88, 0.85, 0.97, 0.90]
    bases = [1000.0 + 10 * i for i in range(30)]
    blocks = [i // 5 for i in range(30)]
    rows = [b * block_ratios[blk] for b, blk in zip(bases, blocks, strict=True)]
    rounds_only = paired_cost(rows, bases)
    assert (rounds_only.low, rounds_only.high) == (pytest.approx(0.05), pytest.approx(0.12))
    result = paired_cost(rows, bases, blocks)
    assert (result.pairs, result.processes) == (30, 6)
    assert result.cost == pytest.approx(0.09)  # between the pairs' 8 % and 10 %
    assert (result.low, result.high) == (pytest.approx(0.03), pytest.approx(0.15))
    assert result.verdict(0.10) is None and rounds_only.verdict(0.10) is None
    assert paired_cost(rows, bases, [0] * 30) == rounds_only  # one pair: the rounds count
