"""Small exact statistics the gate leans on: Wilson intervals, exact McNemar, CUSUM.

Pure functions of counts; no I/O, no third-party numerics (each is a few lines
and exactness matters more than speed at these sizes).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z_95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion; (0, 1) when n is 0."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} must be within 0..{n}")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # At 0 (or n) successes the bound is exactly 0 (or 1): centre - half cancels
    # only up to rounding, which printed a lower bound of 2.78e-17.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def difference_interval(
    successes_a: int, n_a: int, successes_b: int, n_b: int, z: float = Z_95
) -> tuple[float, float, float]:
    """Difference of two proportions (a - b) with Newcombe's hybrid Wilson interval.

    Returns (difference, low, high). Unpaired: for the candidate against current
    over the same period.
    """
    if n_a <= 0 or n_b <= 0:
        return (0.0, -1.0, 1.0)
    pa, pb = successes_a / n_a, successes_b / n_b
    la, ua = wilson_interval(successes_a, n_a, z)
    lb, ub = wilson_interval(successes_b, n_b, z)
    diff = pa - pb
    low = diff - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2)
    high = diff + math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2)
    return (diff, max(-1.0, low), min(1.0, high))


#: Fractional bits kept when summing binomial terms relative to the largest one.
GUARD_BITS = 160


def binomial_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2): the correctly rounded float of the exact sum.

    Linear, not quadratic: the terms are summed relative to the largest, each from
    the one before (C(n, i-1) / C(n, i) = i / (n - i + 1)) in fixed point with
    GUARD_BITS fractional bits, stopping once they vanish, so 40,000 discordant
    pairs take milliseconds (one `math.comb` per call instead of one per term).
    That sum is bracketed by a rigorous error bound; when both ends round to the
    same float it is the float of the exact sum. Otherwise (the exact value sits
    on a rounding tie, common for small n: it is a multiple of 2^-n) the exact
    integer sum decides, built term by term as well.
    """
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    upper_side = 2 * k >= n
    # P(X <= k) = 1 - P(X <= n - k - 1) by symmetry: always sum the smaller tail.
    tail_k = n - k - 1 if upper_side else k
    low, high = _tail_bracket(tail_k, n)
    scale = 1 << (n + GUARD_BITS)
    if upper_side:
        low, high = scale - high, scale - low
    if low / scale == high / scale:
        return low / scale
    exact = _exact_tail(tail_k, n)
    return ((1 << n) - exact) / (1 << n) if upper_side else exact / (1 << n)


def _tail_bracket(k: int, n: int) -> tuple[int, int]:
    """Bounds on sum_{i<=k} C(n, i) * 2^GUARD_BITS, for 2k < n."""
    ratio = term = 1 << GUARD_BITS
    steps = 0
    for i in range(k, 0, -1):
        term = term * i // (n - i + 1)
        if term == 0:
            break
        ratio += term
        steps += 1
    # Each floor loses under one unit, carried into later (smaller) terms: at most
    # steps^2 units; the dropped terms are each under steps + 1 units, k of them.
    slack = (steps + 1) * (steps + 1) + (steps + 1) * k + 1
    top = math.comb(n, k)
    return top * ratio, top * (ratio + slack)


def _exact_tail(k: int, n: int) -> int:
    """sum_{i<=k} C(n, i) in integers, each term from the previous one."""
    term = total = 1
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    return total


def mcnemar_exact(regressions: int, improvements: int) -> tuple[float, float]:
    """Exact McNemar test on discordant pairs: (one-sided p, two-sided p).

    One-sided asks how surprising `improvements` or fewer favourable flips out of
    all discordant ones would be if the change made no difference (a worked example:
    14 regressions, 5 improvements -> 0.0318 one-sided, 0.0636 two-sided).
    """
    n = regressions + improvements
    if n == 0:
        return (1.0, 1.0)
    one_sided = binomial_cdf_half(improvements, n)
    two_sided = min(1.0, 2.0 * binomial_cdf_half(min(regressions, improvements), n))
    return (one_sided, two_sided)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile (0 < q <= 1) of `values`; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return float(ordered[rank - 1])


def histogram_percentile(counts: dict[float, int], q: float) -> float:
    """The nearest-rank q-quantile from a {value: count} histogram; 0 when empty."""
    n = sum(counts.values())
    if n == 0:
        return 0.0
    rank = max(1, math.ceil(q * n))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return float(value)
    return float(max(counts))  # pragma: no cover - unreachable with positive counts


@dataclass
class Cusum:
    """A one-sided Bernoulli CUSUM: alarms when a 0/1 rate rises from p0 towards p1.

    Each observation adds (x - k) with k = (p0 + p1) / 2 to a sum floored at 0;
    the alarm fires when the sum exceeds h, and the sum restarts (Page's CUSUM).
    """

    p0: float
    p1: float
    h: float
    s: float = 0.0
    alarms: int = 0

    @property
    def k(self) -> float:
        """The reference value between the baseline and the rate worth detecting."""
        return (self.p0 + self.p1) / 2.0

    def update(self, event: bool) -> bool:
        """Feed one run; True when this run raises the alarm."""
        self.s = max(0.0, self.s + (1.0 if event else 0.0) - self.k)
        # The tolerance keeps float drift from alarming on a sum that is exactly h
        # (on the lattice `cusum_arl` computes run lengths on, it is not over h).
        if self.s > self.h + 1e-9:
            self.s = 0.0
            self.alarms += 1
            return True
        return False
