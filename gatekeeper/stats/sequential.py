"""Sequential tests: may be read after every run, and alpha still means what it says.

The exact McNemar p-value is a one-look test: re-reading it at every tick and
stopping the first time it dips under alpha raises the false-alarm rate well
above alpha. Here the evidence against "the candidate is no worse" is a
likelihood ratio over the discordant pairs instead. Given a flip, under the
null a pass->fail is at most as likely as a fail->pass (theta <= 1/2); each
alternative theta > 1/2 gives the ratio (2 theta)^r (2 (1 - theta))^i for r
regressions and i improvements. That is a nonnegative supermartingale under
the null, and so is a fixed-weight mixture over several thetas, so by Ville's
inequality the chance it EVER reaches 1/alpha, over any number of looks at any
times, is at most alpha. The mixture spares choosing one alternative: a small
regression (theta near 0.55-0.7) and a large one (0.9) both stop about as soon
as the best single-theta test would, at a cost of ln(1 / its weight) nats. 0.55 is
there for small drops at common failure rates: 0.50 -> 0.45 at half the jobs'
outcomes shared gives theta 0.56, where the 0.6 component alone keeps only two
thirds of the evidence per flip.

`rate_test` is the unpaired counterpart for canary and full, where each job runs
on one arm only: the candidate's failures over the stage against p0, the
current arm's failure rate (the drift detector's frozen p0). For each shift d
the Bernoulli ratio of p0 + d over p0 is a supermartingale while the
candidate fails at most p0 of the time, so the mixture over SHIFTS (weighted
by SHIFT_WEIGHTS) again reaches 1/alpha with chance at most alpha, over the
whole rollout and however often it is read (a CUSUM's false alarms instead
grow with the stage's length). The small shift 0.025 has a small weight: it is
the safety net for a drop of 0.05 that p0's upper bound (below) shrinks to
0.02-0.03, which the larger shifts would never see, and it costs a large drop
only ln(1/0.9) of a nat. It is exact when p0 is. A p0 measured over the current's
runs is not: 0 failures in 20 runs floors it at 0.001, and a healthy candidate
failing 1 job in 20 then looks like a disaster. So the test runs against
`upper_p0`, the upper 95% Wilson bound of the current's rate over the runs it
was measured on: conservative while the reference is small, close to p0 once
it holds thousands of runs.

Pure: counts in, a number out; the counts are what the gate view shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.stats.statistics import Z_95, wilson_interval

#: Shares of the discordant pairs that regress, under the alternatives mixed.
THETAS: tuple[float, ...] = (0.55, 0.6, 0.7, 0.8, 0.9)
#: Their weights: the large regressions (theta 0.9 and above: a 0.20 drop from 0.95 or
#: 0.99) are caught within a few dozen pairs, where every nat of the mixture's cost is a
#: large share of the runs, so they weigh more; small ones run for thousands of pairs.
THETA_WEIGHTS: tuple[float, ...] = (0.175, 0.175, 0.175, 0.175, 0.3)
#: Rises of the failure rate over p0, under the alternatives mixed, and their weights.
SHIFTS: tuple[float, ...] = (0.025, 0.05, 0.1, 0.2)
SHIFT_WEIGHTS: tuple[float, ...] = (0.1, 0.3, 0.3, 0.3)


@dataclass(frozen=True)
class FlipTest:
    """The sequential McNemar figures for one set of flip counts."""

    regressions: int
    improvements: int
    log_ratio: float
    threshold: float
    alpha: float

    @property
    def reject(self) -> bool:
        """True when the evidence reached 1/alpha: the candidate is worse, at level alpha."""
        return self.log_ratio >= self.threshold

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the decision's details."""
        return {"regressions": self.regressions, "improvements": self.improvements,
                "log_likelihood_ratio": round(self.log_ratio, 4),
                "threshold": round(self.threshold, 4), "alpha": self.alpha,
                "reject": self.reject}


def log_ratio(regressions: int, improvements: int,
              thetas: Sequence[float] = THETAS,
              weights: Sequence[float] | None = None) -> float:
    """ln of the mixture likelihood ratio of "candidate worse" over "no difference".

    `weights` default to THETA_WEIGHTS with the default thetas, else equal weights.
    """
    if regressions < 0 or improvements < 0:
        raise ValueError("flip counts must be non-negative")
    if not thetas or any(not 0.5 < t < 1.0 for t in thetas):
        raise ValueError(f"each theta must be within (0.5, 1), got {list(thetas)}")
    if weights is None:
        weights = THETA_WEIGHTS if tuple(thetas) == THETAS else [1.0 / len(thetas)] * len(thetas)
    logs = [math.log(w) + regressions * math.log(2.0 * t)
            + improvements * math.log(2.0 * (1.0 - t)) for t, w in zip(thetas, weights)]
    top = max(logs)
    return top + math.log(sum(math.exp(x - top) for x in logs))


def flip_test(regressions: int, improvements: int, alpha: float) -> FlipTest:
    """Test the flips at level alpha, valid however often it is repeated as pairs arrive."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    return FlipTest(regressions, improvements, log_ratio(regressions, improvements),
                    math.log(1.0 / alpha), alpha)


def flips_of(paired: Mapping[str, Any]) -> tuple[int, int]:
    """(pass->fail, fail->pass) out of a paired report's JSON; (0, 0) when it has none."""
    flips = paired.get("flips") or {}
    return int(flips.get("pass_to_fail", 0)), int(flips.get("fail_to_pass", 0))


@dataclass(frozen=True)
class RateTest:
    """The sequential failure-rate figures for one stage's candidate counts."""

    failures: int
    n: int
    p0: float
    log_ratio: float
    threshold: float
    alpha: float

    @property
    def reject(self) -> bool:
        """True when the evidence reached 1/alpha: the candidate fails more than p0."""
        return self.log_ratio >= self.threshold

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the decision's details."""
        return {"failures": self.failures, "n": self.n, "p0": self.p0,
                "log_likelihood_ratio": round(self.log_ratio, 4),
                "threshold": round(self.threshold, 4), "alpha": self.alpha,
                "reject": self.reject}


def rate_log_ratio(failures: int, n: int, p0: float, shifts: Sequence[float] = SHIFTS,
                   weights: Sequence[float] | None = None) -> float:
    """ln of the mixture likelihood ratio of "fails at p0 + shift" over "fails at p0".

    `weights` (summing to 1) default to SHIFT_WEIGHTS for SHIFTS, equal ones otherwise.
    """
    if not 0 <= failures <= n:
        raise ValueError(f"failures {failures} must be within 0..{n}")
    if not 0.0 < p0 < 1.0:
        raise ValueError(f"p0 must be within (0, 1), got {p0}")
    if not shifts or any(d <= 0.0 for d in shifts):
        raise ValueError(f"each shift must be positive, got {list(shifts)}")
    if weights is None:
        weights = SHIFT_WEIGHTS if tuple(shifts) == SHIFTS else [1.0 / len(shifts)] * len(shifts)
    if len(weights) != len(shifts) or any(w <= 0.0 for w in weights) \
            or not math.isclose(sum(weights), 1.0):
        raise ValueError(f"weights must be positive, one per shift, summing to 1: {weights}")
    passes = n - failures
    logs = []
    for d, w in zip(shifts, weights):
        p1 = min(p0 + d, 1.0 - 1e-9)
        logs.append(math.log(w) + failures * math.log(p1 / p0)
                    + passes * math.log((1.0 - p1) / (1.0 - p0)))
    top = max(logs)
    return top + math.log(sum(math.exp(x - top) for x in logs))


def rate_test(failures: int, n: int, p0: float, alpha: float) -> RateTest:
    """Test the candidate's failures against p0 at level alpha, valid at every look."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    return RateTest(failures, n, p0, rate_log_ratio(failures, n, p0), math.log(1.0 / alpha),
                    alpha)


def upper_p0(p0: float, reference: int, z: float = Z_95) -> float:
    """The upper Wilson bound of a failure rate `p0` measured over `reference` runs.

    `reference` 0 means a fixed baseline, taken as exact.
    """
    if reference <= 0:
        return p0
    failures = min(reference, max(0, round(p0 * reference)))
    return max(p0, wilson_interval(failures, reference, z)[1])
