"""Distribution-free confidence bounds for a quantile, from a histogram. Pure.

The k-th smallest of n runs lies at or below the q-quantile with chance
P(Binomial(n, q) >= k), whatever the distribution (the order-statistic interval
of Thompson 1936; Hahn and Meeker's "Statistical Intervals", ch. 5). So the
largest k with P(Bin(n, q) >= k) >= 1 - a gives a lower bound for the
q-quantile at level a, and the smallest k with P(Bin(n, q) <= k - 1) >= 1 - a an
upper bound (None when even the largest run is not enough). Read once, at the
stage's end: a single look at the stage's alpha, no repeated-look correction.
"""

from __future__ import annotations

import bisect
import functools
import math

#: A log-probability under this has exp() exactly 0.0 in doubles (the least
#: subnormal is e^-744.4), so the tails past it add exactly nothing to the CDF.
_NOTHING = -800.0


@functools.lru_cache(maxsize=64)
def _cdf(n: int, q: float, enough: float) -> tuple[int, list[float]]:
    """(first, P(Bin(n, q) <= k) for k = first..last); 0.0 below first, at least the last above.

    Only the k whose probability is not exactly 0.0 are summed (about 80 standard
    deviations around the mode, not all n + 1): each term and each running sum is
    the same double the whole sum from k = 0 gives, since the terms left out are
    0.0. The log-pmf is concave in k, so walking down from the mode, the first k
    under `_NOTHING` ends the left side. The right side ends there too, or as
    soon as the CDF reaches `enough` (no bound reads past it). Kept per (n, q,
    enough): the arms' windows of one view share their n (a read-only list:
    don't change it).
    """
    lgamma = math.lgamma
    whole, log_q, log_p = lgamma(n + 1), math.log(q), math.log1p(-q)

    def log_pmf(k: int) -> float:  # ln P(Bin(n, q) = k), its constants read once
        return whole - lgamma(k + 1) - lgamma(n - k + 1) + k * log_q + (n - k) * log_p

    mode = min(n, max(0, math.floor((n + 1) * q)))
    left: list[float] = []  # log-pmf from the mode down
    k = mode
    while k >= 0 and (value := log_pmf(k)) >= _NOTHING:
        left.append(value)
        k -= 1
    out, total = [], 0.0
    for value in reversed(left):
        total += math.exp(value)
        out.append(min(1.0, total))
    k = mode + 1
    while out[-1] < enough and k <= n and (value := log_pmf(k)) >= _NOTHING:
        total += math.exp(value)
        out.append(min(1.0, total))
        k += 1
    return mode - len(left) + 1, out


def _ordered(counts: dict[float, int]) -> list[tuple[float, int]]:
    return sorted((v, c) for v, c in counts.items() if c > 0)


def _kth(ordered: list[tuple[float, int]], k: int) -> float:
    """The k-th smallest value (1-based) of the histogram."""
    seen = 0
    for value, count in ordered:
        seen += count
        if seen >= k:
            return value
    return ordered[-1][0]


def quantile_bounds(counts: dict[float, int], q: float,
                    alpha: float) -> tuple[float | None, float | None]:
    """(lower, upper) bounds for the q-quantile, each holding with chance >= 1 - alpha."""
    ordered = _ordered(counts)
    n = sum(c for _, c in ordered)
    if n == 0:
        return None, None
    # Below alpha 0.5 no bound reads the CDF past where it reaches 1 - alpha (the
    # lower bound's test fails from there on), so the sum stops there.
    first, span = _cdf(n, q, 1.0 - alpha if alpha < 0.5 else math.inf)
    last = first + len(span) - 1
    # cdf[j] is 0.0 for j < first, span[j - first] to `last`, span[-1] past it (or,
    # where the sum stopped early, a value the tests read the same way); each test
    # below is monotone in j, so a bisection finds where the scan over every k
    # would stop.
    lower = upper = None
    # P(Bin >= k) = 1 - cdf[k - 1]; the largest k with that >= 1 - alpha (None when
    # even k = 1 falls short: too few runs for a lower bound at this level).

    def holds(j: int) -> bool:  # the lower bound's test of k = j + 1
        return 1.0 - (0.0 if j < first else span[min(j, last) - first]) >= 1.0 - alpha

    if holds(n - 1):
        lower = _kth(ordered, n)
    elif holds(0):
        low, high = 0, min(n - 1, last)  # holds(low), not holds(high)
        while high - low > 1:
            middle = (low + high) // 2
            if holds(middle):
                low = middle
            else:
                high = middle
        lower = _kth(ordered, low + 1)
    # The smallest k with cdf[k - 1] >= 1 - alpha.
    if 0.0 >= 1.0 - alpha:
        upper = _kth(ordered, 1)
    else:
        j = bisect.bisect_left(span, 1.0 - alpha)
        if j < len(span) and first + j + 1 <= n:
            upper = _kth(ordered, first + j + 1)
    return lower, upper
