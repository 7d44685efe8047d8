"""An always-valid interval on candidate - current, for a mean. Pure.

The normal-mixture confidence sequence of Robbins (1970), in the form
Johari, Pekelis and Walsh give for A/B tests (the mSPRT's interval, what
LaunchDarkly's and Optimizely's sequential intervals are built on): with the
difference of two means estimated as `d` with variance `v`, and a normal
mixture of variance `tau2` over the true difference,

    d +- sqrt( v (v + tau2) / tau2 * (log((v + tau2) / v) - 2 log(1 - confidence)) )

covers the true difference at every look with chance at least `confidence`, so
a reader may watch it as often as they like. `tau2` sets where the interval is
tightest: here at about RHO runs per arm (`tau2` = the runs' pooled variance x
2 / RHO), fixed before any data, as a yardstick must be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Runs per arm at which the interval is tightest.
RHO = 400.0
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Difference:
    """candidate - current for one metric: estimate and always-valid bounds."""

    metric: str
    estimate: float | None
    lower: float | None
    upper: float | None
    confidence: float = CONFIDENCE

    def as_dict(self) -> dict[str, object]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 6)
        return {"metric": self.metric, "estimate": rounded(self.estimate),
                "lower": rounded(self.lower), "upper": rounded(self.upper),
                "confidence": self.confidence}


def mean_difference(metric: str, candidate: tuple[int, float, float],
                    current: tuple[int, float, float],
                    confidence: float = CONFIDENCE) -> Difference:
    """The interval on candidate - current from each arm's (n, mean, variance)."""
    (n1, m1, v1), (n0, m0, v0) = candidate, current
    if n1 < 2 or n0 < 2:
        return Difference(metric, None, None, None, confidence)
    estimate = m1 - m0
    variance = v1 / n1 + v0 / n0
    pooled = (v1 + v0) / 2.0
    if variance <= 0.0 or pooled <= 0.0:
        return Difference(metric, estimate, estimate, estimate, confidence)
    tau2 = 2.0 * pooled / RHO
    width = math.sqrt(variance * (variance + tau2) / tau2
                      * (math.log((variance + tau2) / variance) - 2.0 * math.log(1 - confidence)))
    return Difference(metric, estimate, estimate - width, estimate + width, confidence)


def rate_moments(n: int, successes: int) -> tuple[int, float, float]:
    """(n, mean, variance) of a 0/1 outcome with `successes` of `n`."""
    if n <= 0:
        return 0, 0.0, 0.0
    p = successes / n
    return n, p, p * (1.0 - p)


def histogram_moments(histogram: dict[float, int]) -> tuple[int, float, float]:
    """(n, mean, variance) of values read from a histogram {value: count}."""
    n = sum(histogram.values())
    if n <= 0:
        return 0, 0.0, 0.0
    mean = sum(value * count for value, count in histogram.items()) / n
    variance = sum(count * (value - mean) ** 2 for value, count in histogram.items()) / max(1, n - 1)
    return n, mean, variance
