"""What decide() judges a role's stage on, and how it is read out of the gate view. Pure.

`Evidence` is decide()'s input; `evidence_from_view` fills it from a `GateView`
(`gatekeeper.view_model`), reading the view by attribute. A JSON view (the
gatekeeper's, read over HTTP) is validated into a `GateView` first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bindings.models import Stage
from gatekeeper.machine.baseline import (
    baseline_failure,
    baseline_observed,
    baseline_runs,
    run_failure,
)
from gatekeeper.stats.criteria_gate import KeyCounts
from gatekeeper.stats.rollout import Carried, EarlierStage
from gatekeeper.view_model import GateView, RolloutView, UnitsView
from gatekeeper.view_model.concurrent import ConcurrentView
from gatekeeper.view_model.paired import PairedView
from gatekeeper.view_model.reports import ReportsView


@dataclass(frozen=True)
class Evidence:
    """What the gate view says about one role's current stage, as decide() needs it."""

    verdict: str
    reasons: tuple[str, ...] = ()
    #: The gate's reason codes, one per reason (empty: unknown, every reason blocks).
    reason_codes: tuple[str, ...] = ()
    #: Candidate traces (and passes) in the stage's window.
    n: int = 0
    passes: int = 0
    #: Current-arm traces over the same period (for the comparison), or its recent history.
    current_n: int = 0
    current_passes: int = 0
    #: The view's `paired` section (shadow's report), in shadow only. A test or simulator
    #: holding a report's JSON validates it first (`view_model.paired.paired_view`).
    paired: PairedView | None = None
    #: The current arm's failure rate the candidate is tested against (the drift
    #: detector's run_failure p0); None: no sequential rate test.
    baseline_failure: float | None = None
    #: Current runs baseline_failure was measured over (0: a fixed baseline, exact).
    baseline_runs: int = 0
    #: The rate those runs showed (baseline_failure is its upper bound): what the power
    #: hold sizes its alternative with. None: only the bound is known.
    baseline_observed: float | None = None
    #: True when baseline_failure is already the upper bound the tests run against
    #: (the gate view's detectors bound it, `drift.bounded_p0`).
    baseline_bounded: bool = False
    #: The rollout's earlier stages (the gate view's `rollout` section); None: the view
    #: has none, and the sequential tests run over this stage alone at the stage alpha.
    carried: Carried | None = None
    #: The view's `concurrent` section: when present what rolls back (`machine.matched`).
    concurrent: ConcurrentView | None = None
    #: Metrics whose CUSUM alarms on the candidate, and on the current arm.
    candidate_alarms: tuple[str, ...] = ()
    current_alarms: tuple[str, ...] = ()
    #: Per criterion key of the judged arm against current (the view's by_criterion.gate).
    criteria: tuple[KeyCounts, ...] = ()
    #: Why promotion waits for the judge's evidence (the view's judges.wait), if it does.
    judged_wait: str | None = None
    #: The gate view's `reports` section (assigned against reported); None: none.
    reports: ReportsView | None = None
    #: The view's `units` section (`gatekeeper.view.units`); None: no unit test.
    units: UnitsView | None = None
    #: Extra figures to keep in the history entry.
    figures: Mapping[str, Any] = field(default_factory=dict)


def evidence_from_view(view: GateView | Mapping[str, Any]) -> Evidence:
    """Read decide()'s evidence out of the gate view (or its JSON, GET /v1/roles/<role>/gate)."""
    if not isinstance(view, GateView):
        view = GateView.model_validate(view)
    judged = "shadow" if view.stage is Stage.SHADOW else "candidate"
    arm = view.arms.get(judged)
    current = view.arms.get("current")
    drift = view.drift
    alarms = [] if drift is None else drift.alarms
    reasons = () if arm is None else tuple(reason.message for reason in arm.reasons)
    return Evidence(
        verdict="insufficient_data" if arm is None else arm.verdict,
        reasons=reasons,
        reason_codes=() if arm is None else tuple(reason.code for reason in arm.reasons),
        n=0 if arm is None else arm.n,
        passes=0 if arm is None else arm.passes,
        current_n=0 if current is None else current.n,
        current_passes=0 if current is None else current.passes,
        paired=view.paired,
        baseline_failure=baseline_failure(drift),
        baseline_runs=baseline_runs(drift),
        baseline_observed=baseline_observed(drift),
        # The view's detectors take p0 at its bound already (`drift.bounded_p0`).
        baseline_bounded=run_failure(drift) is not None,
        candidate_alarms=tuple(a.metric for a in alarms if a.arm == "candidate"),
        current_alarms=tuple(a.metric for a in alarms if a.arm == "current"),
        carried=carried_of(view.rollout),
        criteria=() if view.by_criterion is None else view.by_criterion.keys_of(judged),
        judged_wait=None if view.judges is None else view.judges.wait,
        reports=view.reports,
        concurrent=view.concurrent,
        units=view.units,
    )


def carried_of(rollout: RolloutView | None) -> Carried | None:
    """The rollout's earlier stages as decide()'s tests carry them (`stats.rollout.Carried`)."""
    if rollout is None:
        return None
    return Carried(began=rollout.began,
                   since=None if rollout.since is None else float(rollout.since),
                   complete=rollout.complete, stages=tuple(EarlierStage(
                       stage=s.stage, share=float(s.share),
                       since=None if s.since is None else float(s.since), n=s.n, passes=s.passes,
                       regressions=0 if s.flips is None else s.flips.pass_to_fail,
                       improvements=0 if s.flips is None else s.flips.fail_to_pass,
                       concurrent=s.concurrent.comparison()) for s in rollout.stages))
