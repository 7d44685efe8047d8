"""The policies and measures every simulator table shares.

The shipped GatePolicy with its floor set for a base rate, the median candidate
runs to a rollback, the Wilson bound and the one-sample information bound.
`bench.rollout_sim`, `bench.rollout_scenarios` and `bench.report_sim` all read
these; keeping them here (importing none of the three) is what keeps the
simulator's modules out of an import circle.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from bench.sim_core import Outcome, Rule, World, rollout
from bindings.models import GatePolicy, Thresholds

BUDGET = 0.01
NEVER = math.inf
Z_95 = 1.959963984540054


def floor_for(base: float) -> float:
    """The min_pass_rate a role with this base rate keeps: 0.9, or base - 0.10 below it."""
    default = Thresholds().min_pass_rate
    return default if round(base - 0.05, 2) >= default else round(base - 0.10, 2)


def policy_for(base: float, *, hold: bool) -> GatePolicy:
    """The shipped GatePolicy, its floor set for the base rate, with or without the hold."""
    shipped = Thresholds()
    thresholds = shipped.model_copy(update={"min_pass_rate": floor_for(base)})
    if not hold:
        thresholds = thresholds.model_copy(update={"min_stage_seconds": 0.0,
                                                   "bake_seconds": 0.0})
    return GatePolicy(thresholds=thresholds)


def kl(q: float, p: float) -> float:
    """KL(Bernoulli(q) || Bernoulli(p)), nats."""
    return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))


def information_bound(base: float, q: float, alpha: float = BUDGET) -> float:
    """ln(1/alpha) / KL(q || base): the fewest runs a test at false-rollback rate alpha needs."""
    return math.log(1.0 / alpha) / kl(q, base)


def wilson_upper(k: int, n: int, z: float = Z_95) -> float:
    """The upper end of the 95% Wilson interval of k out of n."""
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    return min(1.0, centre + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom)


def median(values: list[float]) -> float:
    """The lower median (a missed rollback is `NEVER`)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


@dataclass(frozen=True)
class Healthy:
    """False rollbacks of a healthy candidate over `n` rollouts."""

    back: int
    n: int

    @property
    def rate(self) -> float:
        """The observed false-rollback rate."""
        return self.back / self.n


def batch(world: World, p: float, count: int, seed: int, rule: Rule | None = None,
          literal: bool = False) -> list[Outcome]:
    """`count` rollouts, rollout i seeded with (seed, base, p, i): every policy sees the same jobs."""
    return [rollout(world, p, random.Random(f"{seed}:{world.base}:{p}:{i}"), rule, literal)
            for i in range(count)]


def runs_to_rollback(outcomes: list[Outcome]) -> float:
    """Median candidate runs before the rollback; a candidate never rolled back is NEVER."""
    return median([float(o.runs) if o.rolled_back else NEVER for o in outcomes])
