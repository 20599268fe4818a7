"""How sure a cost line can be: paired rounds, their median and its confidence interval.

On a shared 2-core machine one round of one row can run 15 % faster or slower than the
next for reasons that have nothing to do with OLP. A budget of 10 % cannot be read off two
medians of ten such rounds. So each comparison reads *paired* rounds — the row and its
baseline measured back to back, which a burst of outside load mostly hits alike — and
reports the median of the per-round ratios with a distribution-free interval around it:
the order statistics that bracket the median with at least the stated confidence,
whatever the rounds' distribution (no normality assumed).

Rounds are not the only thing that varies. Two `olp start` processes of the same code and
config serve at steadily different speeds, several points apart (`docs/cache.md`; not
because of the hash seed: with it fixed they still differ), and every round of one pair of
processes carries the same offset. So a run measures each cost line on several pairs of
processes (`bench.run --pair-blocks`), and with more than one, the rounds of a pair count
as one sample: the cost is the median of the pairs' medians, with the interval over the
pairs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PairedCost", "median_interval", "paired_cost"]

CONFIDENCE = 0.95


def median_interval(
    values: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """The interval [x(k), x(n+1-k)] that holds the true median with at least `confidence`.

    k is the largest rank with P(Binomial(n, 1/2) < k) ≤ (1 - confidence) / 2: the median
    lies below x(k) only if fewer than k of n values fall below it. None when n is too
    small for any such interval (fewer than 6 values at 95 %).
    """
    ordered = sorted(values)
    n = len(ordered)
    tail = (1 - confidence) / 2
    below, k = 0.0, 0  # below = P(Binomial(n, 1/2) < k + 1)
    while k < n // 2:
        below += math.comb(n, k) / 2**n
        if below > tail:
            break
        k += 1
    if k == 0:
        return None
    return ordered[k - 1], ordered[n - k]


@dataclass(frozen=True, slots=True)
class PairedCost:
    """1 - (row / baseline) from paired rounds: the median and its interval, if any."""

    cost: float
    low: float | None  # the interval's bounds on the cost (low ≤ cost ≤ high)
    high: float | None
    pairs: int  # paired rounds
    processes: int = 1  # pairs of server processes the cost and its interval are read over

    def verdict(self, budget: float) -> bool | None:
        """True: under the budget; False: over it; None: the interval spans it."""
        if self.low is None or self.high is None:  # too few rounds: the median alone
            return self.cost < budget
        if self.high < budget:
            return True
        if self.low >= budget:
            return False
        return None


def paired_cost(
    rows: Sequence[float], bases: Sequence[float], blocks: Sequence[int] = ()
) -> PairedCost:
    """The cost of `rows` against `bases`, round i of one against round i of the other.

    `blocks[i]` names the pair of processes round i ran on (none: all on one pair). With
    several pairs, each pair's median ratio is one sample.
    """
    by_block: dict[int, list[float]] = {}
    paired = zip(rows, bases, blocks or [0] * len(rows), strict=False)
    for row, base, block in paired:
        if base > 0:
            by_block.setdefault(block, []).append(row / base)
    if not by_block:
        return PairedCost(math.nan, None, None, 0)
    rounds = sum(len(ratios) for ratios in by_block.values())
    if len(by_block) == 1:
        (samples,) = by_block.values()
    else:
        samples = [statistics.median(ratios) for ratios in by_block.values()]
    interval = median_interval(samples)
    # A higher ratio is a lower cost: the ratio interval's ends swap.
    low, high = (None, None) if interval is None else (1 - interval[1], 1 - interval[0])
    return PairedCost(1 - statistics.median(samples), low, high, rounds, len(by_block))
