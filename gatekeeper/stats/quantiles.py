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

import math


def _log_pmf(k: int, n: int, q: float) -> float:
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(q) + (n - k) * math.log1p(-q))


def _cdf(n: int, q: float) -> list[float]:
    """P(Bin(n, q) <= k) for k = 0..n."""
    pmf = [math.exp(_log_pmf(k, n, q)) for k in range(n + 1)]
    out, total = [], 0.0
    for p in pmf:
        total += p
        out.append(min(1.0, total))
    return out


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
    cdf = _cdf(n, q)
    lower = upper = None
    # P(Bin >= k) = 1 - cdf[k - 1]; the largest k with that >= 1 - alpha.
    for k in range(n, 0, -1):
        if 1.0 - (cdf[k - 2] if k >= 2 else 0.0) >= 1.0 - alpha:
            lower = _kth(ordered, k)
            break
    for k in range(1, n + 1):
        if cdf[k - 1] >= 1.0 - alpha:
            upper = _kth(ordered, k)
            break
    return lower, upper
