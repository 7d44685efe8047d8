"""next_step(): decide()'s action on a role explained, and step durations (pure, no I/O)."""

from __future__ import annotations

import calendar

import pytest
from pydantic import ValidationError

from bindings.models import Binding, CanaryStep, GatePolicy, Stage, Thresholds, VersionedBinding
from gatekeeper.machine.decide import Action, Evidence, decide
from gatekeeper.machine.durations import stage_minimum
from gatekeeper.machine.next_step import next_step
from gatekeeper.view_model.paired import paired_view

#: 2026-12-01 12:00:00 UTC.
NOON = float(calendar.timegm((2026, 12, 1, 12, 0, 0)))
POLICY = GatePolicy(thresholds=Thresholds(min_samples=200, min_stage_seconds=300,
                                          bake_seconds=1800))
PASSING = Evidence(verdict="pass", n=400, passes=390, current_n=4000, current_passes=3900)


def _record(stage: Stage, share: float = 0.0, *, since: float = NOON - 3600,
            paused: bool = False, candidate: str | None = "cfg-b",
            steps: tuple[float | CanaryStep, ...] = (0.1, 0.5, 1.0)) -> VersionedBinding:
    binding = Binding(current="cfg-a", candidate=candidate, stage=stage, share=share,
                      gate=POLICY, stage_since=since, paused=paused, steps=steps)
    return VersionedBinding(role="r", version=3, binding=binding, updated_at=since,
                            updated_by="t")


def test_too_few_runs_says_how_many_more_and_what_comes_next() -> None:
    """A canary short of min_samples needs the difference, then goes up one step."""
    evidence = Evidence(verdict="insufficient_data", reasons=("60 traces",), n=60, passes=60)
    step = next_step("r", _record(Stage.CANARY, 0.1), evidence, NOON)
    assert step.action == "hold" and step.state == "waiting"
    assert step.lines() == ["needs 140 more candidate runs (min_samples 200)",
                            "next: canary 0.5"]


def test_young_stage_holds_until_a_clock_time_naming_the_setting() -> None:
    """A passing canary younger than min_stage_seconds holds until since + minimum."""
    step = next_step("r", _record(Stage.CANARY, 0.1, since=NOON), PASSING, NOON + 60)
    assert step.waits[0].until == NOON + 300
    assert step.lines() == ["holds until 12:05 UTC (min_stage_seconds)", "next: canary 0.5"]


def test_both_waits_are_listed_in_decides_order() -> None:
    """Too few runs and too little time are both shown, runs first."""
    evidence = Evidence(verdict="insufficient_data", n=10, passes=10)
    step = next_step("r", _record(Stage.CANARY, 0.5, since=NOON), evidence, NOON + 1)
    assert [w.kind for w in step.waits] == ["runs", "time"]
    assert step.then == "full"


def test_a_ready_stage_advances_to_the_next_step() -> None:
    """A passing stage past its minimum says it advances, and where to."""
    step = next_step("r", _record(Stage.CANARY, 0.1), PASSING, NOON)
    assert step.action == "advance" and step.then == "canary 0.5"
    assert step.lines()[0].startswith("advances to canary 0.5")


def test_full_bakes_and_then_becomes_stable() -> None:
    """The full stage names bake_seconds and ends in the candidate becoming stable."""
    step = next_step("r", _record(Stage.FULL, 1.0, since=NOON - 600), PASSING, NOON)
    assert step.lines() == ["holds until 12:20 UTC (bake_seconds)", "next: stable (cfg-b)"]


def test_paused_names_who_and_why() -> None:
    """A paused role says who paused it and why, then what it still waits for."""
    step = next_step("r", _record(Stage.CANARY, 0.1, paused=True, since=NOON), PASSING, NOON,
                     paused_by=("alice", "freeze for the launch"))
    assert step.state == "paused" and step.action == "skip"
    assert step.lines()[0].startswith("paused by alice: freeze for the launch")
    assert "holds until 12:05 UTC (min_stage_seconds)" in step.lines()


def test_a_failing_gate_says_it_rolls_back() -> None:
    """A failing gate is explained as the rollback decide() takes, with its reason."""
    evidence = Evidence(verdict="fail", reasons=("pass rate 0.5 under 0.9",), n=300)
    step = next_step("r", _record(Stage.CANARY, 0.1), evidence, NOON)
    assert step.state == "rolling_back" and "pass rate 0.5 under 0.9" in step.summary


@pytest.mark.parametrize(("stage", "candidate", "state"), [
    (Stage.STABLE, None, "stable"), (Stage.ROLLED_BACK, "cfg-b", "rolled_back"),
    (Stage.STABLE, "cfg-b", "not_started")])
def test_idle_roles_say_what_would_move_them(stage: Stage, candidate: str | None,
                                             state: str) -> None:
    """Stable, rolled back and not-yet-started roles each get their own state."""
    step = next_step("r", _record(stage, candidate=candidate), PASSING, NOON)
    assert step.action == "skip" and step.state == state


def test_shadow_waits_for_pairs() -> None:
    """In shadow a missing pair count is a wait of its own, named by its setting."""
    paired = {"verdict": "insufficient_data", "reasons": [], "pairs": 150}
    evidence = Evidence(verdict="pass", n=400, passes=390, paired=paired_view(paired))
    step = next_step("r", _record(Stage.SHADOW), evidence, NOON)
    assert step.lines() == ["needs 50 more paired runs (min_samples 200)", "next: canary 0.1"]


def test_a_steps_own_minimum_overrides_min_stage_seconds() -> None:
    """{"share": 0.1, "min_seconds": 600} holds the 0.1 step ten minutes, the others five."""
    steps = (CanaryStep(share=0.1, min_seconds=600), 0.5, 1.0)
    first = _record(Stage.CANARY, 0.1, since=NOON - 400, steps=steps)
    assert stage_minimum(first.binding).seconds == 600
    assert decide("r", first, PASSING, NOON).action is Action.HOLD
    assert next_step("r", first, PASSING, NOON).waits[0].setting == "steps[0].min_seconds"
    second = _record(Stage.CANARY, 0.5, since=NOON - 400, steps=steps)
    assert decide("r", second, PASSING, NOON).action is Action.ADVANCE


def test_a_short_step_minimum_lets_a_step_go_sooner() -> None:
    """A step's min_seconds below min_stage_seconds shortens that step (it overrides)."""
    steps = (CanaryStep(share=0.1, min_seconds=0), 0.5, 1.0)
    record = _record(Stage.CANARY, 0.1, since=NOON - 10, steps=steps)
    assert decide("r", record, PASSING, NOON).action is Action.ADVANCE


def test_steps_accept_shares_and_durations_and_round_trip() -> None:
    """steps mixes bare shares and {share, min_seconds}; the JSON reads back the same."""
    binding = Binding.model_validate({"current": "a", "steps": [
        {"share": 0.1, "min_seconds": 600}, 0.5, 1.0]})
    assert binding.step_shares == (0.1, 0.5, 1.0)
    assert Binding.model_validate_json(binding.model_dump_json()) == binding
    assert binding.model_dump(mode="json")["steps"][1] == 0.5


@pytest.mark.parametrize("steps", [
    [{"share": 0.5}, 0.2], [{"share": 0}], [{"share": 0.1, "min_seconds": -1}],
    [{"share": 0.1, "seconds": 5}]])
def test_bad_steps_are_refused(steps: list[object]) -> None:
    """Descending shares, a zero share, a negative duration and unknown keys are refused."""
    with pytest.raises(ValidationError, match="steps"):
        Binding.model_validate({"current": "a", "steps": steps})
