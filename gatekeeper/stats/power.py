"""Would the gate have caught a regression by now? The power hold's arithmetic. Pure.

The rollout's sequential tests (`gatekeeper.stats.rollout`) roll back on
evidence that the candidate is worse; they never say it is fine. After 900
runs of a role passing 0.5 of its runs, a candidate passing 0.45 has as likely
as not gone unnoticed, and a stage that advances on time alone promotes it.
`power` answers the question a stage should ask before it advances: had the
candidate been worse by the smallest regression worth catching
(`bindings.power_policy.PowerPolicy`), how likely would the tests the gate
runs have rolled it back over the runs the rollout has seen so far?

**The alternative.** current's failure rate f (its runs in the rollout's
cells, with its carried history as a prior: history may size power, never
roll back) against the candidate failing at
f_alt = min(f + drop, max(risk * f, f + min_rise)).

**The tests, as the gate runs them.** In a rollout that began in shadow the
e-value that decides is shadow's sequential McNemar mixture (`THETAS`) times
the comparison with concurrent current over the stages after it, at weight
`CONCURRENT_SHADOW_WEIGHTS[FLIPS]`; otherwise the comparison alone. For each:

- shadow's flips: the observed discordant pairs D over the n pairs, split
  evenly, are what a candidate no worse would show; under the alternative
  the candidate also fails a share g = (f_alt - f) / (1 - f) of the jobs it
  passed, so pairs that both passed become pass->fail flips and fail->pass
  flips become ties. The flip test's log ratio at theta then has mean and
  variance per discordant pair from the resulting share theta_alt.
- the comparison with concurrent current, per stage: its candidate and current
  runs over the cells both ran in; of the expected failures under the
  alternative, each is the candidate's with chance q, and the per-failure log
  ratio at the mixture's odds ratio psi (the binomial bound the cells' exact
  ratio sits under) has a mean and variance.

Each mixture is at least its best component times that component's weight,
so the test rejects once sum(ln w + log ratio) reaches the threshold; the sum
is near normal with the means and variances above, and the power is
Phi((mean - threshold) / sd). It is a design figure, not a test: it decides
only when a stage may advance, never a rollback, so the gate's false-rollback
level does not depend on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from bindings.power_policy import PowerPolicy
from gatekeeper.stats.budget import CONCURRENT, FLIPS
from gatekeeper.stats.concurrent import RISK_WEIGHTS, RISKS
from gatekeeper.stats.sequential import THETA_WEIGHTS, THETAS

_NORMAL = NormalDist()


@dataclass(frozen=True)
class Unpaired:
    """One stage's runs against concurrent current: the cells both arms ran in."""

    candidate_n: int
    current_n: int


@dataclass(frozen=True)
class Paired:
    """Shadow's pairs and how many of them were discordant (either arm alone failed)."""

    pairs: int
    discordant: int


@dataclass(frozen=True)
class Moments:
    """Mean and variance of a log likelihood ratio under the alternative, and the
    ln of the weight of the mixture component(s) it belongs to."""

    mean: float = 0.0
    var: float = 0.0
    log_weight: float = 0.0

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.mean + other.mean, self.var + other.var,
                       self.log_weight + other.log_weight)


def alternative(f: float, policy: PowerPolicy) -> float:
    """The failure rate of a candidate worse by the smallest regression worth catching."""
    rise = policy.drop
    if policy.risk is not None:
        rise = min(rise, max((policy.risk - 1.0) * f, policy.min_rise))
    return min(1.0 - 1e-9, f + rise)


def current_rate(failures: int, runs: int) -> float:
    """current's failure rate for the alternative: Jeffreys' (k + 1/2) / (n + 1)."""
    return (failures + 0.5) / (runs + 1.0)


def _bernoulli(share: float, low: float, high: float) -> tuple[float, float]:
    """Mean and second moment of x*high + (1-x)*low, x ~ Bernoulli(share)."""
    mean = share * high + (1.0 - share) * low
    return mean, share * high * high + (1.0 - share) * low * low


def flips_moments(paired: Paired, f: float, f_alt: float) -> Moments:
    """The flip test's best component (over `THETAS`) under the alternative."""
    n = paired.pairs
    if n <= 0:
        return Moments()
    half = paired.discordant / 2.0
    both_pass = max(0.0, n * (1.0 - f) - half)
    g = min(1.0, (f_alt - f) / (1.0 - f)) if f < 1.0 else 0.0
    regress, improve = half + g * both_pass, half * (1.0 - g)
    discordant = regress + improve
    if discordant <= 0.0:
        return Moments()
    share = regress / discordant
    best = Moments(-math.inf)
    for theta, w in zip(THETAS, THETA_WEIGHTS):
        mean, second = _bernoulli(share, math.log(2.0 * (1.0 - theta)), math.log(2.0 * theta))
        found = Moments(discordant * mean, discordant * second, math.log(w))
        if found.mean + found.log_weight > best.mean + best.log_weight:
            best = found
    return best


def unpaired_moments(stages: Sequence[Unpaired], f: float, f_alt: float) -> Moments:
    """The comparison's best component (over `RISKS`) over `stages`, under the alternative."""
    if not 0.0 < f < 1.0 or not any(s.candidate_n > 0 and s.current_n > 0 for s in stages):
        # No cell both arms ran in: the mixture is exactly 1, no evidence and no cost.
        return Moments()
    odds_ratio = (f_alt / (1.0 - f_alt)) / (f / (1.0 - f))
    best = Moments(-math.inf)
    for psi, w in zip(RISKS, RISK_WEIGHTS):
        total = Moments(0.0, 0.0, math.log(w))
        for stage in stages:
            if stage.candidate_n <= 0 or stage.current_n <= 0:
                continue
            runs = stage.candidate_n + stage.current_n
            pi = stage.candidate_n / runs
            events = stage.candidate_n * f_alt + stage.current_n * f
            # Given a cell's failures, the candidate's count is (noncentral)
            # hypergeometric: binomial over the failures, tilted by the odds ratio, where
            # failures are rare; where they are common it is tighter by 1 - the pooled
            # rate (the finite-population factor), so fewer failures' worth of evidence.
            effective = events * (1.0 - events / runs)
            q = pi * odds_ratio / (pi * odds_ratio + 1.0 - pi)
            q_psi = pi * psi / (pi * psi + 1.0 - pi)
            mean, second = _bernoulli(q, math.log((1.0 - q_psi) / (1.0 - pi)),
                                      math.log(q_psi / pi))
            total = total + Moments(effective * mean, effective * second)
        if total.mean + total.log_weight > best.mean + best.log_weight:
            best = total
    return best if best.mean > -math.inf else Moments()


@dataclass(frozen=True)
class Power:
    """The chance the gate would have caught the alternative by now, and its figures."""

    power: float
    needed: float
    current_failure: float
    alternative: float
    mean: float
    sd: float
    threshold: float

    @property
    def enough(self) -> bool:
        """True once the power reached what the policy asks for."""
        return self.power >= self.needed

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the decision's details and the `next` section."""
        return {"power": round(self.power, 4), "min_power": self.needed,
                "current_failure": round(self.current_failure, 6),
                "alternative": round(self.alternative, 6), "mean": round(self.mean, 4),
                "sd": round(self.sd, 4), "threshold": round(self.threshold, 4),
                "enough": self.enough}

    def reason(self) -> str:
        """Why the stage waits, in one sentence."""
        return (f"waiting for power: a candidate failing {self.alternative:.3g} of its runs "
                f"against current's {self.current_failure:.3g} would have been caught with "
                f"chance {self.power:.0%} so far; gate.power.min_power is {self.needed:.0%}")


def power_of(shadow: Paired | None, stages: Sequence[Unpaired], current: tuple[int, int],
             threshold: float, weights: Mapping[str, float], policy: PowerPolicy) -> Power:
    """The power the rollout's evidence so far gives against the policy's alternative.

    `shadow` is the rollout's shadow pairs (None: the rollout did not begin in
    shadow); `stages` every stage's comparison with concurrent current, shadow's
    first when the rollout began there; `current` current's (failures, runs) over
    the rollout with its carried history; `threshold` the ln level the combined
    e-value must reach and `weights` its tests' weights (`budget.combine`). The
    combined e-value is at least each weighted test, so its power is at least
    the larger of the two tests' own.
    """
    f = current_rate(*current)
    f_alt = alternative(f, policy)
    found = [_chance(unpaired_moments(stages, f, f_alt), weights.get(CONCURRENT, 0.0),
                     threshold)]
    if shadow is not None and weights.get(FLIPS, 0.0) > 0.0:
        chained = flips_moments(shadow, f, f_alt) + unpaired_moments(stages[1:], f, f_alt)
        found.append(_chance(chained, weights[FLIPS], threshold))
    chance, mean, sd = max(found)
    return Power(chance, policy.min_power, f, f_alt, mean, sd, threshold)


def _chance(total: Moments, weight: float, threshold: float) -> tuple[float, float, float]:
    """(power, mean, sd) of one weighted test: it rejects once ln w + its log reaches the
    threshold; its log is at least its best component's log ratio plus that ln weight."""
    if weight <= 0.0 or total.mean <= 0.0:
        return 0.0, 0.0, 0.0
    mean = total.mean + total.log_weight + math.log(weight)
    # Compound sums (a random number of failures or flips, each a log ratio): the
    # variance is the expected count times each term's second moment.
    sd = math.sqrt(total.var)
    if sd <= 0.0:
        return (1.0 if mean >= threshold else 0.0), mean, sd
    return _NORMAL.cdf((mean - threshold) / sd), mean, sd
