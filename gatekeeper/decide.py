"""One role, one tick: advance, roll back, hold, or leave it alone. Pure.

The rule, in order (the first that applies wins):

1. no live rollout (no candidate, or stable / rolled back) or a paused role: skip;
2. the gate fails on the stage's window (a forbidden call or a lost required
   tool fails it at once, at any n): roll back;
3. a drift detector alarms on the candidate (CUSUM over the stage's runs against
   the current arm's rates): roll back. This is the fast path for large regressions;
4. in shadow, the paired comparison fails (a required tool lost, or McNemar
   one-sided p < alpha once there are min_samples pairs): roll back;
5. in shadow, the sequential McNemar test (`gatekeeper.sequential`) rejects at
   alpha: roll back. It is read at every tick and stays valid at every tick, so
   a clear regression stops after a few dozen flips, not at the stage's end;
   in any live stage, the sequential failure-rate test of the candidate's stage
   runs against the current arm's rate (the drift detector's frozen p0, taken
   at its upper 95% bound) rejects at alpha: roll back. Same guarantee, unpaired;
6. too few traces (gate `insufficient_data`, or in shadow fewer pairs than
   `min_shadow_pairs`, default min_samples): hold;
7. the stage has not lasted its minimum (`gatekeeper.durations`: min_stage_seconds, a
   step's own min_seconds, full: bake_seconds): hold;
8. the candidate is worse than the current arm over the same stage, by a one-sided
   test at alpha: roll back. Taken last, it is read once per stage: on the one tick
   that either advances or rolls back, never again on each tick of a hold;
9. otherwise: advance one step.

Shadow is where the paired evidence is free for users (its output is discarded),
so `min_shadow_pairs` sizes it for power against the smallest drop worth
catching; CUSUM watches every run for the large ones.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from bindings.models import Binding, Stage, Thresholds, VersionedBinding
from gatekeeper.durations import stage_minimum
from gatekeeper.sequential import flip_test, flips_of, rate_test, upper_p0
from gatekeeper.statistics import difference_interval

LIVE_STAGES = frozenset({Stage.SHADOW, Stage.CANARY, Stage.FULL})


class Action(str, enum.Enum):
    """What the gatekeeper does to a role this tick."""

    ADVANCE = "advance"
    ROLLBACK = "rollback"
    HOLD = "hold"
    SKIP = "skip"


@dataclass(frozen=True)
class Evidence:
    """What the gate view says about one role's current stage, as decide() needs it."""

    verdict: str
    reasons: tuple[str, ...] = ()
    #: Candidate traces (and passes) in the stage's window.
    n: int = 0
    passes: int = 0
    #: Current-arm traces over the same period (for the comparison), or its recent history.
    current_n: int = 0
    current_passes: int = 0
    #: The shadow paired report (pairing.PairedReport.as_dict()), in shadow only.
    paired: Mapping[str, Any] | None = None
    #: The current arm's failure rate the candidate is tested against (the drift
    #: detector's run_failure p0); None: no sequential rate test.
    baseline_failure: float | None = None
    #: Current runs baseline_failure was measured over (0: a fixed baseline, exact).
    baseline_runs: int = 0
    #: Metrics whose CUSUM alarms on the candidate, and on the current arm.
    candidate_alarms: tuple[str, ...] = ()
    current_alarms: tuple[str, ...] = ()
    #: Extra figures to keep in the history entry.
    figures: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """The gatekeeper's answer for one role: the action, why, and the numbers behind it."""

    role: str
    action: Action
    version: int
    stage: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    #: Alerts to raise whatever the action (a drifting stable current).
    alerts: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for --dry-run output and webhook events."""
        return {"role": self.role, "action": self.action.value, "version": self.version,
                "stage": self.stage, "reason": self.reason, "details": self.details,
                "alerts": list(self.alerts)}


def shadow_pairs_needed(thresholds: Thresholds) -> int:
    """Paired runs shadow needs before it may pass: min_shadow_pairs, else min_samples."""
    if thresholds.min_shadow_pairs is None:
        return thresholds.min_samples
    return max(thresholds.min_samples, thresholds.min_shadow_pairs)


def required_seconds(binding: Binding) -> float:
    """How long the binding's current stage must last before it may advance."""
    return stage_minimum(binding).seconds


def decide(role: str, record: VersionedBinding, evidence: Evidence, now: float) -> Decision:
    """Decide what to do with `role` at `now`, given its binding and the gate's evidence."""
    binding = record.binding
    thresholds = binding.gate.thresholds
    alerts = tuple(f"drift on current {binding.current}: {m}" for m in evidence.current_alarms)
    numbers = _numbers(evidence)

    def make(action: Action, reason: str, **extra: Any) -> Decision:
        return Decision(role, action, record.version, binding.stage.value, reason,
                        {**numbers, **extra}, alerts)

    if binding.candidate is None or binding.stage not in LIVE_STAGES:
        return make(Action.SKIP, f"no rollout in progress (stage {binding.stage.value})")
    if binding.paused:
        return make(Action.SKIP, "paused by an operator")
    if evidence.verdict == "fail":
        return make(Action.ROLLBACK, "gate failed: " + "; ".join(evidence.reasons),
                    gate_reasons=list(evidence.reasons))
    if evidence.candidate_alarms:
        return make(Action.ROLLBACK,
                    f"drift alarm on candidate {binding.candidate}: "
                    + ", ".join(evidence.candidate_alarms),
                    drift_alarms=list(evidence.candidate_alarms))
    paired = evidence.paired if binding.stage is Stage.SHADOW else None
    if paired is not None and paired.get("verdict") == "fail":
        return make(Action.ROLLBACK, "shadow comparison failed: "
                    + "; ".join(paired.get("reasons", [])))
    if paired is not None:
        sequential = flip_test(*flips_of(paired), alpha=thresholds.alpha)
        if sequential.reject:
            return make(Action.ROLLBACK,
                        f"shadow sequential McNemar: {sequential.regressions} pass->fail vs "
                        f"{sequential.improvements} fail->pass, likelihood ratio "
                        f"e^{sequential.log_ratio:.2f} >= 1/alpha (alpha {thresholds.alpha:g})",
                        sequential=sequential.as_dict())
    if evidence.baseline_failure is not None and 0.0 < evidence.baseline_failure < 1.0:
        p0 = min(0.999, upper_p0(evidence.baseline_failure, evidence.baseline_runs))
        rated = rate_test(evidence.n - evidence.passes, evidence.n, p0, alpha=thresholds.alpha)
        if rated.reject:
            return make(Action.ROLLBACK,
                        f"sequential rate test: {rated.failures} of {rated.n} candidate runs "
                        f"failed against p0 {rated.p0:.4f}, likelihood ratio "
                        f"e^{rated.log_ratio:.2f} >= 1/alpha (alpha {thresholds.alpha:g})",
                        sequential=rated.as_dict())
    if evidence.verdict != "pass":
        return make(Action.HOLD, "waiting for data: " + "; ".join(evidence.reasons))
    if paired is not None and paired.get("verdict") != "pass":
        return make(Action.HOLD, "waiting for pairs: " + "; ".join(paired.get("reasons", [])))
    if paired is not None and int(paired.get("pairs", 0)) < shadow_pairs_needed(thresholds):
        return make(Action.HOLD, f"waiting for pairs: {int(paired.get('pairs', 0))} of "
                    f"min_shadow_pairs {shadow_pairs_needed(thresholds)}")
    since = binding.stage_since if binding.stage_since is not None else now
    elapsed, needed = now - since, required_seconds(binding)
    if elapsed < needed:
        return make(Action.HOLD, f"stage has lasted {elapsed:.0f}s of {needed:.0f}s",
                    elapsed_s=round(elapsed, 3), required_s=needed)
    # The stage's one look at the unpaired comparison: this tick advances or rolls back.
    worse = _worse_than_current(evidence, thresholds.alpha)
    if worse is not None:
        return make(Action.ROLLBACK, worse)
    return make(Action.ADVANCE, f"gate passed on {evidence.n} traces after {elapsed:.0f}s",
                elapsed_s=round(elapsed, 3))


def _worse_than_current(evidence: Evidence, alpha: float) -> str | None:
    """A reason when the candidate's pass rate is below current's at one-sided level alpha."""
    if evidence.n == 0 or evidence.current_n == 0:
        return None
    # -inv_cdf(alpha), not inv_cdf(1 - alpha): 1 - 1e-300 rounds to 1.0, outside its domain.
    z = -NormalDist().inv_cdf(alpha)
    diff, _, high = difference_interval(evidence.passes, evidence.n, evidence.current_passes,
                                        evidence.current_n, z)
    if high >= 0.0:
        return None
    return (f"candidate pass rate {evidence.passes}/{evidence.n} is below current's "
            f"{evidence.current_passes}/{evidence.current_n} (difference {diff:+.3f}, "
            f"one-sided upper bound {high:+.3f} < 0 at alpha {alpha:g})")


def _numbers(evidence: Evidence) -> dict[str, Any]:
    out: dict[str, Any] = {"verdict": evidence.verdict, "n": evidence.n,
                           "passes": evidence.passes, "current_n": evidence.current_n,
                           "current_passes": evidence.current_passes}
    if evidence.paired is not None:
        out["paired"] = {k: evidence.paired[k] for k in ("pairs", "flips", "mcnemar")
                         if k in evidence.paired}
    out.update(evidence.figures)
    return out


def evidence_from_view(view: Mapping[str, Any]) -> Evidence:
    """Read decide()'s evidence out of the JSON of GET /v1/roles/<role>/gate."""
    arms = view.get("arms", {})
    arm = arms.get("shadow" if view.get("stage") == Stage.SHADOW.value else "candidate", {})
    current = arms.get("current", {})
    drift = view.get("drift") or {}
    alarms = drift.get("alarms", [])
    reasons = tuple(r.get("message", str(r)) if isinstance(r, Mapping) else str(r)
                    for r in arm.get("reasons", []))
    return Evidence(
        verdict=str(arm.get("verdict", "insufficient_data")),
        reasons=reasons,
        n=int(arm.get("n", 0)),
        passes=int(arm.get("passes", 0)),
        current_n=int(current.get("n", 0)),
        current_passes=int(current.get("passes", 0)),
        paired=view.get("paired"),
        baseline_failure=_baseline_failure(drift),
        baseline_runs=_baseline_runs(drift),
        candidate_alarms=tuple(a["metric"] for a in alarms if a.get("arm") == "candidate"),
        current_alarms=tuple(a["metric"] for a in alarms if a.get("arm") == "current"),
    )


def _baseline_failure(drift: Mapping[str, Any]) -> float | None:
    """The run_failure p0 the gate view's candidate detector runs with, if it has one."""
    detector = (drift.get("candidate") or {}).get("run_failure") or {}
    p0 = detector.get("p0")
    # Without the reference count the p0 can't be bounded: no rate test then.
    if not isinstance(p0, (int, float)) or not isinstance(detector.get("reference"), int):
        return None
    return float(p0)


def _baseline_runs(drift: Mapping[str, Any]) -> int:
    """How many current runs that p0 was measured over (0: a fixed baseline)."""
    detector = (drift.get("candidate") or {}).get("run_failure") or {}
    reference = detector.get("reference")
    return int(reference) if isinstance(reference, int) else 0
