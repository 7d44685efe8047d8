"""decide() under the stage alpha: early rollbacks by always-valid tests, one fixed look."""

from __future__ import annotations

import math

from bindings.models import Binding, GatePolicy, Stage, Thresholds, VersionedBinding
from gatekeeper.machine.decide import Action, Evidence, decide
from gatekeeper.stats.budget import (
    FLIPS,
    FLOOR,
    RATE,
    SEQUENTIAL_SHARE,
    combine,
    final_alpha,
    weights,
)
from gatekeeper.view_model.paired import paired_view

NOW = 1_000_000.0
POLICY = GatePolicy(thresholds=Thresholds(min_samples=200, min_stage_seconds=600,
                                          bake_seconds=3600))


def _record(stage: Stage, *, since: float, policy: GatePolicy = POLICY) -> VersionedBinding:
    share = {Stage.SHADOW: 0.0, Stage.CANARY: 0.1, Stage.FULL: 1.0}[stage]
    binding = Binding(current="cfg-a", candidate="cfg-b", stage=stage, share=share,
                      gate=policy, stage_since=since)
    return VersionedBinding(role="r", version=3, binding=binding, updated_at=since,
                            updated_by="t")


def _shadow_evidence(regressions: int, improvements: int) -> Evidence:
    pairs = 1000
    paired = {"verdict": "pass", "reasons": [], "pairs": pairs, "blocking": [],
              "flips": {"pass_to_fail": regressions, "fail_to_pass": improvements}}
    passes = 950 - regressions + improvements
    return Evidence(verdict="pass", n=pairs, passes=passes, current_n=pairs, current_passes=950,
                    paired=paired_view(paired))


def test_the_fixed_sample_mcnemar_is_not_read_during_the_hold() -> None:
    """60 vs 25 flips (exact p 9e-5) hold inside min_stage_seconds, roll back once after."""
    evidence = _shadow_evidence(60, 25)
    for age in (10, 200, 599):
        decision = decide("r", _record(Stage.SHADOW, since=NOW - age), evidence, NOW)
        assert decision.action is Action.HOLD, decision.reason
    decision = decide("r", _record(Stage.SHADOW, since=NOW - 601), evidence, NOW)
    assert decision.action is Action.ROLLBACK
    assert "McNemar at the stage's end" in decision.reason


def test_a_candidate_at_half_its_runs_rolls_back_within_30_runs() -> None:
    """Pass rate 0.5 against current's 0.05 failure rate: rolled back before min_samples."""
    record = _record(Stage.CANARY, since=NOW - 5)
    for n in range(1, 31):
        evidence = Evidence(verdict="insufficient_data", n=n, passes=n // 2,
                            baseline_failure=0.06, baseline_bounded=True)
        decision = decide("r", record, evidence, NOW)
        if decision.action is Action.ROLLBACK:
            break
    assert decision.action is Action.ROLLBACK and n <= 30
    assert decision.details["sequential"]["reject"] is True


def test_a_healthy_candidate_below_min_samples_only_holds() -> None:
    """Failing at current's rate, a young canary waits for data and is never rolled back."""
    record = _record(Stage.CANARY, since=NOW - 5)
    for n in range(1, 200):
        evidence = Evidence(verdict="insufficient_data", n=n, passes=n - n // 20,
                            baseline_failure=0.06, baseline_bounded=True)
        assert decide("r", record, evidence, NOW).action is Action.HOLD


def test_under_the_floor_by_a_hair_holds_instead_of_rolling_back() -> None:
    """A point pass rate under min_pass_rate the floor test has not excluded holds."""
    evidence = Evidence(verdict="fail", reasons=("pass rate 0.880 is under 0.900",),
                        reason_codes=("pass_rate",), n=250, passes=220)
    decision = decide("r", _record(Stage.CANARY, since=NOW - 700), evidence, NOW)
    assert decision.action is Action.HOLD and "not yet excluded" in decision.reason
    far = Evidence(verdict="fail", reasons=("pass rate 0.600 is under 0.900",),
                   reason_codes=("pass_rate",), n=250, passes=150)
    decision = decide("r", _record(Stage.CANARY, since=NOW - 700), far, NOW)
    assert decision.action is Action.ROLLBACK and "mostly floor" in decision.reason


def test_a_rated_reason_other_than_the_pass_rate_rolls_back_at_the_look_only() -> None:
    """A p95-steps breach holds inside the stage and rolls back at its one look."""
    evidence = Evidence(verdict="fail", reasons=("p95 steps 30 over the ceiling 20",),
                        reason_codes=("p95_steps",), n=250, passes=240)
    young = decide("r", _record(Stage.CANARY, since=NOW - 100), evidence, NOW)
    assert young.action is Action.HOLD
    old = decide("r", _record(Stage.CANARY, since=NOW - 700), evidence, NOW)
    assert old.action is Action.ROLLBACK and "stage's end" in old.reason


def test_a_lost_required_tool_rolls_back_at_once() -> None:
    """Zero tolerance: a blocking reason rolls back at any n and any age."""
    evidence = Evidence(verdict="fail", reasons=("required tool 'verify' never called",),
                        reason_codes=("required_tool_lost",), n=3, passes=3)
    decision = decide("r", _record(Stage.CANARY, since=NOW - 1), evidence, NOW)
    assert decision.action is Action.ROLLBACK and "gate failed" in decision.reason


def test_the_stage_alpha_is_split_as_declared() -> None:
    """Weights sum to 1 per stage; the e-value threshold is 1 / (share * alpha)."""
    for stage in (Stage.SHADOW, Stage.CANARY, Stage.FULL):
        for floor in (True, False):
            chosen = weights(stage, floor=floor)
            assert math.isclose(sum(chosen.values()), 1.0)
            assert (FLOOR in chosen) is floor and (FLIPS in chosen) is (stage is Stage.SHADOW)
    combined = combine({RATE: 0.0}, weights(Stage.CANARY, floor=True), 0.0025)
    assert math.isclose(combined.threshold, math.log(1 / (SEQUENTIAL_SHARE * 0.0025)))
    assert math.isclose(combined.log_e, 0.0, abs_tol=1e-12) and not combined.reject
    # One test alone rejects once its e-value passes 1 / (weight * share * alpha).
    w = weights(Stage.CANARY, floor=True)[RATE]
    edge = math.log(1 / (w * SEQUENTIAL_SHARE * 0.0025))
    assert combine({RATE: edge + 1e-9}, weights(Stage.CANARY, floor=True), 0.0025).reject
    assert not combine({RATE: edge - 1e-3}, weights(Stage.CANARY, floor=True), 0.0025).reject
    assert final_alpha(0.0025, Stage.SHADOW) == final_alpha(0.0025, Stage.CANARY) / 2
