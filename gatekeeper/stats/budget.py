"""One stage alpha, spent explicitly across the gate's tests.

`thresholds.alpha` is what each stage of the ladder adds to the chance a
rollout rolls back a candidate that is no worse than current (nor under
`min_pass_rate`), all tests together. It is split once, in the open, instead
of each test taking the whole alpha:

- SEQUENTIAL_SHARE (0.65) for the tests read at every tick, combined as one
  e-value: the weighted average of the sequential failure-rate test against
  current's p0, the sequential McNemar test over the shadow flips and the
  pass-rate floor test. Each is a nonnegative supermartingale under its null,
  so their fixed-weight average is one too, and by Ville's inequality it ever
  reaches 1 / (share * alpha) with chance at most share * alpha, however often
  it is read (Vovk and Wang 2021: averaging e-values needs no Bonferroni split,
  and a test with evidence need not wait for the others). They run over the
  whole rollout, not one stage (`gatekeeper.stats.rollout`), so they spend the
  share of the rollout's alpha (the stage alpha times the ladder's stages) at
  once; the weights are those of the stage the rollout began in (`weights`).
- CUSUM_SHARE (0.1) for the candidate's CUSUMs, split equally among the
  CUSUM_DETECTORS metrics watched (run_failure, tool_error, forbidden_call: any
  one alarm rolls back): each h is derived for an in-control ARL of
  CUSUM_HORIZON_RUNS / (share * alpha / CUSUM_DETECTORS) runs at its p0
  (`cusum_arl`), so over a stage of up to CUSUM_HORIZON_RUNS candidate runs the
  chance that any of them alarms falsely stays within the share (a union bound:
  it holds however the metrics are correlated, e.g. tool errors that fail runs).
- CRITERIA_SHARE (0.05) for the per-criterion tests (`gatekeeper.stats.criteria_gate`):
  each deterministic criterion of the spec, candidate against current, read at
  every tick as the pass rate is; split evenly (Bonferroni) over the gated
  criterion keys, so one key's test names the key that failed.
- REPORTS_SHARE (0.05) for the report-rate test (`gatekeeper.stats.reports`):
  the candidate's runs that never reported against current's, per closed time
  bucket of assigned runs, by the concurrent test (`gatekeeper.stats.concurrent`),
  valid at every look over the stage.
- PAIRWISE_SHARE (0.05) for the blind pairwise judge's flips in shadow
  (`gatekeeper.stats.pairwise_gate`): the sequential McNemar test over the
  judged pairs the candidate lost against those it won, valid at every look.
- FINAL_SHARE (0.1) for the fixed-sample looks taken once, on the tick that
  advances or rolls back: the unpaired comparison with current over the stage,
  and in shadow the exact McNemar test (half each in shadow).

Per rollout the chance of a false rollback is then at most alpha times the
number of stages (shadow, each canary step, full): the shipped alpha 0.0025 with
the default ladder (shadow, 0.1, 0.5, full) keeps it within 1%. The CUSUM and
the one-look tests spend theirs stage by stage, the sequential tests the
rollout's sum in one e-process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bindings.models import Stage

#: The stage alpha's split: one named share per family of tests that can roll back.
#: To add a test family, add its share here and take it from another: the shares
#: must sum to at most 1 (checked on import), and the module docstring says what each
#: one buys. Read a share as `SHARES[name] * alpha`.
SHARES: dict[str, float] = {
    "sequential": 0.65,
    # The report-rate test (`gatekeeper.stats.reports`): a candidate whose runs
    # report less often than current's, over the same minutes.
    "reports": 0.05,
    "criteria": 0.05,
    "cusum": 0.1,
    "final": 0.1,
    # The blind pairwise judge's flips in shadow (`gatekeeper.stats.pairwise_gate`).
    "pairwise": 0.05,
}
if sum(SHARES.values()) > 1.0 + 1e-12:
    raise ValueError(f"the alpha shares sum to {sum(SHARES.values())} > 1: {SHARES}")
SEQUENTIAL_SHARE = SHARES["sequential"]
CRITERIA_SHARE = SHARES["criteria"]
REPORTS_SHARE = SHARES["reports"]
CUSUM_SHARE = SHARES["cusum"]
FINAL_SHARE = SHARES["final"]
PAIRWISE_SHARE = SHARES["pairwise"]
#: Candidate runs per stage the CUSUM's share is sized for.
CUSUM_HORIZON_RUNS = 10_000
#: The candidate's CUSUMs that share CUSUM_SHARE (`drift.METRICS`).
CUSUM_DETECTORS = 3
#: Cells (time buckets) per stage the concurrent CUSUMs' share is sized for (83 h at 30 s).
CUSUM_HORIZON_CELLS = 10_000

RATE = "rate"
FLIPS = "flips"
FLOOR = "floor"
#: The candidate against concurrent current (`gatekeeper.stats.concurrent`).
CONCURRENT = "concurrent"

#: Declared weights of the sequential tests per stage (shadow has the paired flips).
SHADOW_WEIGHTS = {FLIPS: 0.4, RATE: 0.4, FLOOR: 0.2}
LIVE_WEIGHTS = {RATE: 0.8, FLOOR: 0.2}
#: The same against concurrent current (a view with the `concurrent` section): the
#: floor is no rollback test there (a world under the floor is not the candidate's
#: fault); it holds promotion instead. In a rollout that began in shadow, shadow's flips
#: carried on by the comparison after it are the efficient test (paired, every job both
#: arms), so they weigh 0.9; the comparison over every stage, shadow's cells unpaired
#: included, is the rest.
CONCURRENT_SHADOW_WEIGHTS = {FLIPS: 0.9, CONCURRENT: 0.1}
CONCURRENT_LIVE_WEIGHTS = {CONCURRENT: 1.0}


def weights(stage: Stage, *, floor: bool, concurrent: bool = False) -> dict[str, float]:
    """The e-value weights in `stage`; without a floor its weight goes to the others."""
    if concurrent:
        return dict(CONCURRENT_SHADOW_WEIGHTS if stage is Stage.SHADOW
                    else CONCURRENT_LIVE_WEIGHTS)
    chosen = dict(SHADOW_WEIGHTS if stage is Stage.SHADOW else LIVE_WEIGHTS)
    if not floor:
        chosen.pop(FLOOR)
    total = sum(chosen.values())
    return {name: w / total for name, w in chosen.items()}


def cusum_arl0(alpha: float, detectors: int = CUSUM_DETECTORS) -> float:
    """The in-control ARL each of the candidate's `detectors` CUSUMs is calibrated to at
    stage alpha `alpha`: they split CUSUM_SHARE equally."""
    return CUSUM_HORIZON_RUNS / (CUSUM_SHARE * alpha / detectors)


def criteria_alpha(alpha: float, keys: int) -> float:
    """The level of each gated criterion's test: CRITERIA_SHARE of the stage alpha over `keys`."""
    return CRITERIA_SHARE * alpha / max(1, keys)


def concurrent_cusum_alpha(alpha: float, metrics: int) -> float:
    """Each concurrent CUSUM's level: the CUSUM share of stage alpha `alpha`, split evenly
    over the `metrics` it watches (run failure, tool error, forbidden call)."""
    return CUSUM_SHARE * alpha / metrics


def final_alpha(alpha: float, stage: Stage) -> float:
    """The level of each one-look test at the stage's end (two share it in shadow)."""
    return FINAL_SHARE * alpha / (2.0 if stage is Stage.SHADOW else 1.0)


@dataclass(frozen=True)
class Combined:
    """The sequential tests' e-values (as logs), their weighted average, and the verdict."""

    logs: Mapping[str, float]
    weights: Mapping[str, float]
    log_e: float
    threshold: float
    alpha: float

    @property
    def reject(self) -> bool:
        """True when the averaged evidence reached 1 / (SEQUENTIAL_SHARE * alpha).

        `alpha` is the rollout's (`rollout.rollout_alpha`) when the tests ran over
        the rollout, the stage's when they ran over the stage alone."""
        return self.log_e >= self.threshold

    def leading(self) -> str:
        """The test contributing most to the average."""
        return max(self.weights, key=lambda name: self.weights[name] * math.exp(
            min(700.0, self.logs.get(name, 0.0))))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the decision's details."""
        return {"log_e": round(self.log_e, 4), "threshold": round(self.threshold, 4),
                "alpha": self.alpha, "share": SEQUENTIAL_SHARE,
                "tests": {name: {"weight": round(w, 4),
                                 "log_e": round(self.logs.get(name, 0.0), 4)}
                          for name, w in self.weights.items()},
                "reject": self.reject}


def combine(logs: Mapping[str, float], chosen: Mapping[str, float], alpha: float) -> Combined:
    """Average the e-values exp(logs) with the weights `chosen`; a missing test counts as 1."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    terms = [(math.log(w) + logs.get(name, 0.0)) for name, w in chosen.items() if w > 0.0]
    top = max(terms)
    log_e = top + math.log(sum(math.exp(t - top) for t in terms))
    return Combined(dict(logs), dict(chosen), log_e,
                    math.log(1.0 / (SEQUENTIAL_SHARE * alpha)), alpha)
