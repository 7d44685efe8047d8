"""decide() returns what a hold waits for; `next`, `rolegate status` and the page show just that.

The hold rules are written once (`gatekeeper.machine.holds`): decide() holds on the
first and carries them all in `Decision.waits`; next_step renders those waits and
never works them out again (pure, no I/O).
"""

from __future__ import annotations

import calendar
from typing import Any

from bindings.models import Binding, CanaryStep, GatePolicy, Stage, Thresholds, VersionedBinding
from gatekeeper.machine.decide import Action, Evidence, decide
from gatekeeper.machine.next_step import explain
from router.cli.status import render

#: 2026-12-01 12:00:00 UTC.
NOON = float(calendar.timegm((2026, 12, 1, 12, 0, 0)))
POLICY = GatePolicy(thresholds=Thresholds(min_samples=200, min_stage_seconds=300))
SHORT = Evidence(verdict="insufficient_data", reasons=("10 traces, need 200",), n=10,
                 passes=10)
PASSING = Evidence(verdict="pass", n=400, passes=390, current_n=4000, current_passes=3900)


def _record(*, since: float = NOON, paused: bool = False,
            steps: tuple[float | CanaryStep, ...] = (0.1, 0.5, 1.0)) -> VersionedBinding:
    binding = Binding(current="cfg-a", candidate="cfg-b", stage=Stage.CANARY, share=0.1,
                      gate=POLICY, stage_since=since, paused=paused, steps=steps)
    return VersionedBinding(role="r", version=3, binding=binding, updated_at=since,
                            updated_by="t")


def _view(next_section: dict[str, Any]) -> dict[str, Any]:
    """The gate view JSON status reads, around a `next` section."""
    return {"role": "r", "version": 3, "stage": "canary", "share": 0.1, "paused": False,
            "current": "cfg-a", "candidate": "cfg-b", "window": {"since": NOON},
            "arms": {}, "next": next_section}


def test_a_hold_returns_every_wait_in_order_and_next_shows_exactly_those() -> None:
    """Too few runs and too little time: decide() holds on the first and returns both;
    next's waits and lines are decide()'s, and status prints each of them."""
    record = _record()
    decision = decide("r", record, SHORT, NOON + 60)
    assert decision.action is Action.HOLD and decision.reason.startswith("waiting for data")
    assert [(w.kind, w.setting) for w in decision.waits] == [("runs", "min_samples"),
                                                            ("time", "min_stage_seconds")]
    step = explain(decision, record.binding, SHORT, NOON + 60)
    assert step.waits == decision.waits
    assert step.lines()[:2] == [w.text for w in decision.waits]
    shown = render(_view(step.as_dict()))
    for wait in decision.waits:
        assert any(line.endswith(wait.text) for line in shown), (wait.text, shown)


def test_a_met_hold_is_no_longer_a_wait() -> None:
    """Once the stage has lasted its minimum, time is gone from decide()'s waits and next's."""
    record = _record(since=NOON - 3600)
    decision = decide("r", record, SHORT, NOON)
    assert [w.kind for w in decision.waits] == ["runs"]
    assert explain(decision, record.binding, SHORT, NOON).waits == decision.waits


def test_a_paused_role_shows_what_it_would_wait_for() -> None:
    """decide() skips a paused role but still returns its waits; next lists them under
    the pause."""
    record = _record(paused=True)
    decision = decide("r", record, SHORT, NOON + 60)
    assert decision.action is Action.SKIP
    assert [w.kind for w in decision.waits] == ["runs", "time"]
    step = explain(decision, record.binding, SHORT, NOON + 60)
    assert step.state == "paused" and step.waits == decision.waits


def test_an_approval_step_waits_for_a_human_in_decides_words() -> None:
    """A passing step with approval: the one wait is decide()'s, and next's summary is it."""
    record = _record(since=NOON - 3600,
                     steps=(CanaryStep(share=0.1, approval=True), 0.5, 1.0))
    decision = decide("r", record, PASSING, NOON)
    assert [w.kind for w in decision.waits] == ["approval"]
    step = explain(decision, record.binding, PASSING, NOON)
    assert step.state == "awaiting_approval" and step.waits == decision.waits
    assert step.summary == decision.waits[0].text and "canary 0.5" in step.summary


def test_advance_and_rollback_wait_for_nothing() -> None:
    """Only holds (and a paused role) carry waits."""
    record = _record(since=NOON - 3600)
    assert decide("r", record, PASSING, NOON).waits == ()
    failing = Evidence(verdict="fail", reasons=("lost a required tool",),
                       reason_codes=("required_tool_lost",), n=400, passes=100)
    rolled = decide("r", record, failing, NOON)
    assert rolled.action is Action.ROLLBACK and rolled.waits == ()
