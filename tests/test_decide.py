"""decide(): advance, roll back, hold or skip one role, and the stage table it drives."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from bindings.errors import IllegalTransition
from bindings.models import Binding, GatePolicy, Stage, Thresholds, VersionedBinding
from gatekeeper.machine.decide import (
    Action,
    Evidence,
    decide,
    evidence_from_view,
    shadow_pairs_needed,
)
from gatekeeper.machine.stages import TRANSITIONS, Event, apply
from gatekeeper.view_model import DetectorView, DriftOnView, GateView, arms_view
from gatekeeper.view_model.concurrent import concurrent_view
from gatekeeper.view_model.paired import paired_view

NOW = 1_000_000.0
POLICY = GatePolicy(thresholds=Thresholds(min_samples=20, min_stage_seconds=60,
                                          bake_seconds=300, alpha=0.01))


def _record(stage: Stage, share: float = 0.0, *, since: float = NOW - 120,
            paused: bool = False, candidate: str | None = "cfg-b") -> VersionedBinding:
    binding = Binding(current="cfg-a", candidate=candidate, stage=stage, share=share,
                      gate=POLICY, stage_since=since, paused=paused)
    return VersionedBinding(role="r", version=7, binding=binding, updated_at=since,
                            updated_by="t")


PASSING = Evidence(verdict="pass", n=100, passes=95, current_n=1000, current_passes=950)
PAIRED_PASS = {"verdict": "pass", "reasons": [], "pairs": 100}


def test_pass_after_duration_advances() -> None:
    """A passing canary that lasted min_stage_seconds advances, keeping the version read."""
    decision = decide("r", _record(Stage.CANARY, 0.1), PASSING, NOW)
    assert decision.action is Action.ADVANCE and decision.version == 7
    assert decision.details["n"] == 100


def test_pass_too_soon_holds() -> None:
    """A passing canary younger than min_stage_seconds holds."""
    decision = decide("r", _record(Stage.CANARY, 0.1, since=NOW - 10), PASSING, NOW)
    assert decision.action is Action.HOLD and "10s of 60s" in decision.reason


def test_full_waits_for_bake() -> None:
    """The full stage waits for bake_seconds, not just min_stage_seconds."""
    assert decide("r", _record(Stage.FULL, 1.0, since=NOW - 120), PASSING, NOW).action \
        is Action.HOLD
    assert decide("r", _record(Stage.FULL, 1.0, since=NOW - 301), PASSING, NOW).action \
        is Action.ADVANCE


def test_gate_fail_rolls_back_with_reasons() -> None:
    """A failing gate rolls back and the history details carry its reasons."""
    evidence = Evidence(verdict="fail", reasons=("forbidden-tool calls in 1 of 3 traces",), n=3)
    decision = decide("r", _record(Stage.CANARY, 0.1, since=NOW - 1), evidence, NOW)
    assert decision.action is Action.ROLLBACK
    assert decision.details["gate_reasons"] == ["forbidden-tool calls in 1 of 3 traces"]


def test_insufficient_holds() -> None:
    """Too few traces holds, however long the stage has lasted."""
    evidence = Evidence(verdict="insufficient_data", reasons=("5 traces",), n=5, passes=5)
    assert decide("r", _record(Stage.CANARY, 0.5), evidence, NOW).action is Action.HOLD


def test_candidate_drift_alarm_rolls_back() -> None:
    """A CUSUM alarm on the candidate rolls it back before the stage ends."""
    evidence = Evidence(verdict="insufficient_data", n=5, candidate_alarms=("run_failure",))
    decision = decide("r", _record(Stage.CANARY, 0.1), evidence, NOW)
    assert decision.action is Action.ROLLBACK and "run_failure" in decision.reason


def test_significantly_worse_than_current_rolls_back() -> None:
    """A candidate whose pass rate is clearly below current's is rolled back at stage end."""
    evidence = Evidence(verdict="pass", n=400, passes=340, current_n=2000, current_passes=1900)
    decision = decide("r", _record(Stage.CANARY, 0.5), evidence, NOW)
    assert decision.action is Action.ROLLBACK and "below current" in decision.reason


def test_shadow_needs_paired_pass() -> None:
    """Shadow advances only on a passing paired report, rolls back on a failing one."""
    record = _record(Stage.SHADOW)
    waiting = Evidence(verdict="pass", n=100, passes=95,
                       paired=paired_view({"verdict": "insufficient", "reasons": ["5 pairs"]}))
    assert decide("r", record, waiting, NOW).action is Action.HOLD
    failing = Evidence(verdict="pass", n=100, passes=95,
                       paired=paired_view({"verdict": "fail", "reasons": ["lost verify"]}))
    assert decide("r", record, failing, NOW).action is Action.ROLLBACK
    passing = Evidence(verdict="pass", n=100, passes=95, paired=paired_view(PAIRED_PASS))
    assert decide("r", record, passing, NOW).action is Action.ADVANCE


@pytest.mark.parametrize("record", [
    _record(Stage.CANARY, 0.1, paused=True),
    _record(Stage.STABLE, candidate=None),
    _record(Stage.ROLLED_BACK),
])
def test_paused_or_idle_roles_are_skipped(record: VersionedBinding) -> None:
    """A paused role, a stable role and a rolled-back role are left alone, even on a failure."""
    evidence = Evidence(verdict="fail", reasons=("bad",), candidate_alarms=("run_failure",))
    assert decide("r", record, evidence, NOW).action is Action.SKIP


def test_current_drift_raises_alert() -> None:
    """A drift alarm on a stable current is an alert, not a move."""
    decision = decide("r", _record(Stage.STABLE, candidate=None),
                      Evidence(verdict="pass", current_alarms=("tool_error",)), NOW)
    assert decision.action is Action.SKIP and decision.alerts == (
        "drift on current cfg-a: tool_error",)


# -- the stage table ------------------------------------------------------------

def _binding_in(stage: Stage, event: Event | None = None) -> Binding:
    """A binding in `stage` that `event` can act on if the table lets it: paused for a resume,
    standing on steps that ask for approval for an approve."""
    share = {Stage.CANARY: 0.1, Stage.FULL: 1.0}.get(stage, 0.0)
    steps = ({"share": 0.1, "approval": True}, 0.5, {"share": 1.0, "approval": True})
    return Binding(current="cfg-a", candidate="cfg-b", stage=stage, share=share,
                   stage_since=0.0, paused=event is Event.RESUME,
                   **({"steps": steps} if event is Event.APPROVE else {}))


@pytest.mark.parametrize(("stage", "event"), list(itertools.product(Stage, Event)))
def test_stage_table_walk(stage: Stage, event: Event) -> None:
    """Every (stage, event), pause, resume and approve included: a legal move lands in the
    table's targets; one the table does not list raises, whatever the binding."""
    binding = _binding_in(stage, event)
    allowed = TRANSITIONS.get((stage, event))
    if allowed is None:
        with pytest.raises(IllegalTransition):
            apply(binding, event, 5.0, share=0.5, actor="alice", reason="ok")
        return
    move = apply(binding, event, 5.0, share=0.5, actor="alice", reason="ok")
    assert move.binding.stage in allowed
    if event in (Event.PAUSE, Event.RESUME, Event.APPROVE):
        assert (move.binding.share, move.binding.stage_since) == (binding.share, 0.0)
        assert move.binding.paused is (event is Event.PAUSE)
        assert (move.binding.approved is not None) is (event is Event.APPROVE)
    else:
        assert move.binding.stage_since == 5.0
    assert binding.stage is stage  # the input is untouched


def test_every_event_is_in_the_table_and_the_table_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each event has at least one row; removing a row makes the move illegal, pause included."""
    assert {event for _, event in TRANSITIONS} == set(Event)
    monkeypatch.delitem(TRANSITIONS, (Stage.CANARY, Event.PAUSE))
    with pytest.raises(IllegalTransition, match="cannot pause a role in stage 'canary'"):
        apply(_binding_in(Stage.CANARY), Event.PAUSE, 5.0)
    monkeypatch.setitem(TRANSITIONS, (Stage.FULL, Event.APPROVE), frozenset({Stage.CANARY}))
    with pytest.raises(IllegalTransition, match="to 'full'"):
        apply(_binding_in(Stage.FULL, Event.APPROVE), Event.APPROVE, 5.0)


def test_ladder_walk_shadow_to_stable() -> None:
    """Advancing from stable walks shadow, each canary step, full, then stable."""
    binding = _binding_in(Stage.STABLE)
    seen = []
    for _ in range(5):
        binding = apply(binding, Event.ADVANCE, 1.0).binding
        seen.append((binding.stage, binding.share))
    assert seen == [(Stage.SHADOW, 0.0), (Stage.CANARY, 0.1), (Stage.CANARY, 0.5),
                    (Stage.FULL, 1.0), (Stage.STABLE, 0.0)]
    assert binding.current == "cfg-b" and binding.candidate is None


@pytest.mark.parametrize("stage", list(Stage))
def test_pause_and_resume_flip_only_the_flag(stage: Stage) -> None:
    """Pause and resume keep the stage and share; repeating either one is refused."""
    binding = _binding_in(stage)
    paused = apply(binding, Event.PAUSE, 5.0).binding
    assert paused.paused and (paused.stage, paused.share) == (binding.stage, binding.share)
    with pytest.raises(IllegalTransition):
        apply(paused, Event.PAUSE, 6.0)
    resumed = apply(paused, Event.RESUME, 7.0).binding
    assert not resumed.paused and resumed.stage is stage
    with pytest.raises(IllegalTransition):
        apply(resumed, Event.RESUME, 8.0)


# -- shadow sizing, the sequential McNemar test, one unpaired look per stage -------

def _shadow(min_shadow_pairs: int | None) -> VersionedBinding:
    thresholds = POLICY.thresholds.model_copy(update={"min_shadow_pairs": min_shadow_pairs})
    binding = Binding(current="cfg-a", candidate="cfg-b", stage=Stage.SHADOW,
                      gate=POLICY.model_copy(update={"thresholds": thresholds}),
                      stage_since=NOW - 120)
    return VersionedBinding(role="r", version=7, binding=binding, updated_at=NOW - 120,
                            updated_by="t")


def test_sequential_mcnemar_rolls_back_before_enough_data() -> None:
    """Lopsided flips roll shadow back at once, even while the gate still wants data."""
    paired = {"verdict": "insufficient", "reasons": ["14 pairs"], "pairs": 14,
              "flips": {"pass_to_fail": 14, "fail_to_pass": 0}}
    # The shadow's own pass rate (14 of 14) gives the rate and floor tests nothing.
    evidence = Evidence(verdict="insufficient_data", n=14, passes=14,
                        paired=paired_view(paired))
    decision = decide("r", _shadow(None), evidence, NOW)
    assert decision.action is Action.ROLLBACK and "mostly flips" in decision.reason
    assert decision.details["sequential"]["reject"] is True


def test_balanced_flips_do_not_trip_the_sequential_test() -> None:
    """Flips that are as many one way as the other advance a passing shadow."""
    paired = {**PAIRED_PASS, "flips": {"pass_to_fail": 6, "fail_to_pass": 6}}
    evidence = Evidence(verdict="pass", n=100, passes=95, paired=paired_view(paired))
    assert decide("r", _shadow(None), evidence, NOW).action is Action.ADVANCE


def test_shadow_holds_until_min_shadow_pairs() -> None:
    """A passing shadow holds below min_shadow_pairs and advances once it has them."""
    record = _shadow(500)
    short = Evidence(verdict="pass", n=100, passes=95, paired=paired_view(PAIRED_PASS))
    decision = decide("r", record, short, NOW)
    assert decision.action is Action.HOLD and "100 of min_shadow_pairs 500" in decision.reason
    enough = Evidence(verdict="pass", n=500, passes=475,
                      paired=paired_view({**PAIRED_PASS, "pairs": 500}))
    assert decide("r", record, enough, NOW).action is Action.ADVANCE


def test_shadow_pairs_needed_defaults_to_min_samples() -> None:
    """Unset, shadow needs min_samples pairs; set, never fewer than min_samples."""
    assert shadow_pairs_needed(Thresholds(min_samples=20)) == 20
    assert shadow_pairs_needed(Thresholds(min_samples=20, min_shadow_pairs=800)) == 800
    assert shadow_pairs_needed(Thresholds(min_samples=20, min_shadow_pairs=5)) == 20


def test_min_shadow_pairs_must_be_positive() -> None:
    """A min_shadow_pairs of 0 is refused by the model."""
    with pytest.raises(ValidationError):
        Thresholds(min_shadow_pairs=0)


def test_unpaired_look_waits_for_the_stage_end() -> None:
    """A worse-looking canary still inside min_stage_seconds holds: one look per stage."""
    evidence = Evidence(verdict="pass", n=400, passes=340, current_n=2000, current_passes=1900)
    decision = decide("r", _record(Stage.CANARY, 0.5, since=NOW - 10), evidence, NOW)
    assert decision.action is Action.HOLD and "10s of 60s" in decision.reason


def test_sequential_rate_test_rolls_back_a_failing_canary() -> None:
    """A canary failing far above the current's p0 rolls back before min_samples."""
    evidence = Evidence(verdict="insufficient_data", n=15, passes=5, baseline_failure=0.05)
    decision = decide("r", _record(Stage.CANARY, 0.1), evidence, NOW)
    assert decision.action is Action.ROLLBACK and "mostly rate" in decision.reason
    assert decision.details["sequential"]["p0"] == 0.05


def test_evidence_reads_the_candidate_detector_p0() -> None:
    """The gate view's candidate run_failure p0 becomes the rate test's baseline."""
    view = GateView.model_construct(
        stage=Stage.CANARY,
        arms=arms_view({"candidate": {"verdict": "pass", "reasons": [], "n": 50, "passes": 48}}),
        drift=DriftOnView.model_construct(candidate={"run_failure": DetectorView.model_construct(
            p0=0.04, reference=500, observed=None)}, alarms=[]))
    evidence = evidence_from_view(view)
    assert (evidence.baseline_failure, evidence.baseline_runs) == (0.04, 500)
    bare = GateView.model_construct(stage=Stage.CANARY, arms={})
    assert evidence_from_view(bare).baseline_failure is None


def test_rate_test_bounds_a_p0_measured_over_few_runs() -> None:
    """A p0 floored from 0 failures in 20 current runs does not fail a 1-in-20 candidate."""
    evidence = Evidence(verdict="insufficient_data", n=39, passes=36, baseline_failure=0.001,
                        baseline_runs=20)
    assert decide("r", _record(Stage.CANARY, 0.1), evidence, NOW).action is Action.HOLD
    exact = Evidence(verdict="insufficient_data", n=39, passes=36, baseline_failure=0.001)
    assert decide("r", _record(Stage.CANARY, 0.1), exact, NOW).action is Action.ROLLBACK


def test_the_stage_end_look_names_the_missing_runs_it_counted_as_failed() -> None:
    """Under `gate.reports.missing_runs: fail` the matched counts include unreported runs
    as failures; a stage-end rollback on them says how many, not only the rates."""
    from gatekeeper.stats.concurrent import RISKS
    comparison = {"logs": [0.0] * len(RISKS), "cells": 40,
                  "candidate": {"n": 400, "events": 60}, "current": {"n": 2000, "events": 100}}
    evidence = Evidence(verdict="pass", n=370, passes=340, current_n=2000, current_passes=1900,
                        concurrent=concurrent_view({
                            "metrics": {"run_failure": comparison}, "alarms": [],
                            "missing": {"candidate": 30, "current": 0}}))
    record = _record(Stage.CANARY, 0.5)
    # The power hold off: the look is read on the tick that would advance.
    unpowered = record.binding.model_copy(update={"gate": POLICY.model_copy(
        update={"power": None})})
    decision = decide("r", record.model_copy(update={"binding": unpowered}), evidence, NOW)
    assert decision.action is Action.ROLLBACK, decision.reason
    assert "below current" in decision.reason and "340/400" in decision.reason
    assert "counting 30 candidate and 0 current runs that never reported as failed" \
        in decision.reason
