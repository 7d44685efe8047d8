"""Quantile bounds summed over the CDF's non-zero stretch only: the answers of the whole sum."""

from __future__ import annotations

import math
import random

import pytest

from gatekeeper.stats.quantiles import quantile_bounds


def _whole_sum_bounds(counts: dict[float, int], q: float,
                      alpha: float) -> tuple[float | None, float | None]:
    """The bounds from every one of the n + 1 terms of the CDF, in order."""
    ordered = sorted((v, c) for v, c in counts.items() if c > 0)
    n = sum(c for _, c in ordered)
    if n == 0:
        return None, None

    def kth(k: int) -> float:
        seen = 0
        for value, count in ordered:
            seen += count
            if seen >= k:
                return value
        return ordered[-1][0]

    pmf = [math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * math.log(q) + (n - k) * math.log1p(-q)) for k in range(n + 1)]
    cdf, total = [], 0.0
    for p in pmf:
        total += p
        cdf.append(min(1.0, total))
    lower = upper = None
    # P(Bin >= k) = 1 - P(Bin <= k - 1) = 1 - cdf[k - 1].
    for k in range(n, 0, -1):
        if 1.0 - cdf[k - 1] >= 1.0 - alpha:
            lower = kth(k)
            break
    for k in range(1, n + 1):
        if cdf[k - 1] >= 1.0 - alpha:
            upper = kth(k)
            break
    return lower, upper


def _histogram(rng: random.Random, n: int) -> dict[float, int]:
    """n runs over a few hundred distinct values, as a latency or steps histogram holds."""
    counts: dict[float, int] = {}
    for _ in range(n):
        value = round(rng.lognormvariate(1.2, 0.4), 2)
        counts[value] = counts.get(value, 0) + 1
    return counts


@pytest.mark.parametrize("q", [0.05, 0.5, 0.9, 0.95, 0.99])
def test_small_windows_give_the_whole_sums_bounds(q: float) -> None:
    """Every n up to 300 at several levels: the same (lower, upper) as the whole sum."""
    rng = random.Random(int(q * 1000))
    for n in range(1, 301):
        counts = _histogram(rng, n)
        for alpha in (1e-6, 0.0005, 0.01, 0.05, 0.5, 0.9, 1.0):
            assert quantile_bounds(counts, q, alpha) == _whole_sum_bounds(counts, q, alpha), \
                (n, q, alpha)


def test_large_windows_give_the_whole_sums_bounds() -> None:
    """Windows of 2,000 to 100,000 runs (where the tails underflow): the same bounds."""
    rng = random.Random(23)
    for n in (2_000, 17_321, 100_000):
        counts = _histogram(rng, n)
        for q, alpha in ((0.95, 0.0005), (0.95, 0.025), (0.99, 0.001), (0.5, 0.01)):
            assert quantile_bounds(counts, q, alpha) == _whole_sum_bounds(counts, q, alpha), \
                (n, q, alpha)


def test_one_value_repeated_bounds_at_that_value() -> None:
    """A histogram of one value bounds every quantile at that value, or not at all."""
    assert quantile_bounds({4.0: 500}, 0.95, 0.01) == (4.0, 4.0)
    assert quantile_bounds({4.0: 3}, 0.95, 0.01) == (4.0, None)
    assert quantile_bounds({}, 0.95, 0.01) == (None, None)


@pytest.mark.parametrize(("n", "q"), [(20, 0.5), (60, 0.95), (400, 0.95), (1000, 0.99)])
def test_each_bound_misses_the_true_quantile_at_most_alpha_of_the_time(n: int, q: float) -> None:
    """Runs from a continuous law with a known q-quantile: the lower bound lies above it, and
    the upper bound below it, in at most alpha of the samples (binomial noise allowed)."""
    rng = random.Random(n)
    alpha, samples = 0.05, 2000
    true = -math.log(1.0 - q)  # the exponential law's q-quantile
    above = below = 0
    for _ in range(samples):
        counts: dict[float, int] = {}
        for _ in range(n):
            value = rng.expovariate(1.0)
            counts[value] = counts.get(value, 0) + 1
        lower, upper = quantile_bounds(counts, q, alpha)
        above += lower is not None and lower > true
        below += upper is not None and upper < true
    slack = 3 * math.sqrt(alpha * (1 - alpha) / samples)
    assert above / samples <= alpha + slack and below / samples <= alpha + slack, (above, below)
