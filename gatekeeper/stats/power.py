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

Each mixture's log is taken at ln sum_k w_k e^(M_k) of its components' mean
log ratios M_k (near the best component plus ln its weight once evidence is
large, near 0 while it is small), with the components' variances; the power
is the chance a random walk with that mean and variance has crossed the
threshold by now (Brownian motion's first-passage law: a sequential test
rejects the first time it crosses), the larger of the tests', and never less
than at the end of an earlier stage. It is a design figure, not a test: it
decides only when a stage may advance, never a rollback, so the gate's
false-rollback level does not depend on it.
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


#: One group of terms of a log ratio: how many (the expected failures or flips), the
#: chance each is the candidate's (a regression), and each component's (low, high)
#: log ratio for a term that is not / is.
Group = tuple[float, float, Sequence[tuple[float, float]]]


def _best(groups: Sequence[Group], weights: Sequence[float]) -> Moments:
    """A mixture's log ratio, summed over `groups`, under the alternative.

    Its mean is taken as ln sum_k w_k e^(M_k), the components' mean log ratios M_k put
    into the mixture: near the best component plus ln its weight once the evidence is
    large, near 0 (a mixture of ratios near 1) while it is small, so a stage just
    begun neither adds nor costs much. Its variance is the components' variances
    averaged with the weights each has in that sum.
    """
    if not groups:
        return Moments()
    means, variances = [], []
    for values in zip(*(g[2] for g in groups)):
        mean = var = 0.0
        for (count, share, _), (low, high) in zip(groups, values):
            m, second = _bernoulli(share, low, high)
            mean, var = mean + count * m, var + count * second
        means.append(mean)
        variances.append(var)
    terms = [math.log(w) + m for w, m in zip(weights, means)]
    top = max(terms)
    shares = [math.exp(t - top) for t in terms]
    total = sum(shares)
    return Moments(top + math.log(total),
                   sum(p * v for p, v in zip(shares, variances)) / total)


def flips_moments(paired: Paired, f: float, f_alt: float) -> Moments:
    """The flip test's mixture (over `THETAS`) under the alternative."""
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
    values = [(math.log(2.0 * (1.0 - t)), math.log(2.0 * t)) for t in THETAS]
    return _best([(discordant, regress / discordant, values)], THETA_WEIGHTS)


def unpaired_moments(stages: Sequence[Unpaired], f: float, f_alt: float) -> Moments:
    """The comparison's mixture (over `RISKS`) over `stages`, under the alternative."""
    if not 0.0 < f < 1.0:
        return Moments()
    odds_ratio = (f_alt / (1.0 - f_alt)) / (f / (1.0 - f))
    groups: list[Group] = []
    for stage in stages:
        if stage.candidate_n <= 0 or stage.current_n <= 0:
            # No cell both arms ran in: no evidence, and no cost.
            continue
        runs = stage.candidate_n + stage.current_n
        pi = stage.candidate_n / runs
        events = stage.candidate_n * f_alt + stage.current_n * f
        # Given a cell's failures, the candidate's count is (noncentral) hypergeometric:
        # binomial over the failures, tilted by the odds ratio, where failures are rare;
        # where they are common it is tighter by 1 - the pooled rate (the
        # finite-population factor), so fewer failures' worth of evidence.
        effective = events * (1.0 - events / runs)
        q = pi * odds_ratio / (pi * odds_ratio + 1.0 - pi)
        values = []
        for psi in RISKS:
            q_psi = pi * psi / (pi * psi + 1.0 - pi)
            values.append((math.log((1.0 - q_psi) / (1.0 - pi)), math.log(q_psi / pi)))
        groups.append((effective, q, values))
    return _best(groups, RISK_WEIGHTS)


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
    the larger of the two tests' own, and at least what it was at the end of each
    earlier stage.
    """
    f = current_rate(*current)
    f_alt = alternative(f, policy)
    # The chance a sequential test has crossed by now is at least the chance it had by
    # the end of each earlier stage: take the best prefix (a stage just begun can only
    # lower the value of the path so far, never the chance it already crossed).
    found = [(0.0, 0.0, 0.0)]
    for end in range(1, len(stages) + 1):
        found.append(_chance(unpaired_moments(stages[:end], f, f_alt),
                             weights.get(CONCURRENT, 0.0), threshold))
    if shadow is not None and weights.get(FLIPS, 0.0) > 0.0:
        flips = flips_moments(shadow, f, f_alt)
        for end in range(1, max(1, len(stages)) + 1):
            chained = flips + unpaired_moments(stages[1:end], f, f_alt)
            found.append(_chance(chained, weights[FLIPS], threshold))
    chance, mean, sd = max(found)
    return Power(chance, policy.min_power, f, f_alt, mean, sd, threshold)


def _chance(total: Moments, weight: float, threshold: float) -> tuple[float, float, float]:
    """(power, mean, sd) of one weighted test: the chance its log, at least its mixture's
    bound plus ln `weight`, has reached the threshold by now.

    A sequential test rejects the first time it crosses, so its power is the chance the
    path has *ever* crossed, not that it ends above: for a random walk with this
    mean and variance so far, Brownian motion with drift's first-passage law,
    Phi((m - b) / s) + e^(2 m b / s^2) Phi((-b - m) / s), with b the distance to the
    threshold. It never falls as evidence is added, as the real chance never does.
    """
    if weight <= 0.0 or total.mean <= 0.0:
        return 0.0, 0.0, 0.0
    mean = total.mean
    # Compound sums (a random number of failures or flips, each a log ratio): the
    # variance is the expected count times each term's second moment.
    sd = math.sqrt(total.var)
    distance = threshold - total.log_weight - math.log(weight)
    shown = mean + total.log_weight + math.log(weight)
    if distance <= 0.0:
        return 1.0, shown, sd
    if sd <= 0.0:
        return (1.0 if mean >= distance else 0.0), shown, sd
    direct = _NORMAL.cdf((mean - distance) / sd)
    z = (-distance - mean) / sd
    # e^(2 m b / s^2) Phi(z), in logs: the exponent alone can overflow.
    tail = 0.0
    if z > -37.0:
        tail = math.exp(min(700.0, 2.0 * mean * distance / total.var
                            + math.log(max(1e-300, _NORMAL.cdf(z)))))
    return min(1.0, direct + tail), shown, sd
