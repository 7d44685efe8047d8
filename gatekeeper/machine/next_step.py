"""What the gatekeeper will do next with a role, and what it waits for, in plain words. Pure.

The action is decide()'s own, taken on the same evidence, so the status command,
the dashboard and the gatekeeper can never disagree about what happens next.
This module only explains it: each condition a held stage still waits for
(decide()'s own `Decision.waits`, `gatekeeper.machine.holds`), with its numbers
and the setting behind them ("needs 140 more candidate runs
(min_samples 200)", "holds until 12:05 UTC (min_stage_seconds)"), and where the
next advance goes ("next: canary 0.5").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bindings.models import Binding, Stage, VersionedBinding
from gatekeeper.machine.deadline import deadline_of
from gatekeeper.machine.decide import Action, Decision, Evidence, decide, evidence_from_view

# Wait and its kinds, the clock time and the stage words were written here first: re-exported.
from gatekeeper.machine.holds import WAIT_KINDS as WAIT_KINDS
from gatekeeper.machine.holds import Wait as Wait
from gatekeeper.machine.holds import clock_time as clock_time
from gatekeeper.machine.holds import judged_arm
from gatekeeper.machine.power_hold import more_runs
from gatekeeper.machine.stages import destination as destination
from gatekeeper.machine.stages import stage_label as stage_label

# The states are the gate view's words too (`machine.vocabulary`).
from gatekeeper.machine.vocabulary import (
    ADVANCING,
    AWAITING_APPROVAL,
    HELD,
    NOT_STARTED,
    PAUSED,
    ROLLED_BACK,
    ROLLING_BACK,
    STABLE,
    WAITING,
)
from gatekeeper.machine.vocabulary import STATES as STATES
from gatekeeper.view_model import GateView, NextView


@dataclass(frozen=True)
class NextStep:
    """decide()'s action on a role, explained: the state, what it waits for, what comes next."""

    action: str
    state: str
    summary: str
    #: Where the next advance takes the role ("canary 0.5", "full", ...), if anywhere.
    then: str | None
    waits: tuple[Wait, ...]
    #: decide()'s own reason, verbatim.
    reason: str
    #: Rules that would have rolled back and that gate.responses only warns on.
    warnings: tuple[str, ...] = ()
    #: The graded response decide() applied, when gate.responses chose one.
    response: dict[str, Any] | None = None
    #: When a live stage's deadline falls and what it does then (`machine.deadline`).
    deadline: dict[str, Any] | None = None

    def lines(self) -> list[str]:
        """The explanation as lines for a terminal or a page: the waits, then what's next."""
        then = [] if self.then is None else [f"next: {self.then}"]
        if self.state == WAITING:
            return [*(wait.text for wait in self.waits), *then, *self.warnings]
        if self.state == PAUSED:
            return [self.summary, *(wait.text for wait in self.waits), *then, *self.warnings]
        return [self.summary, *self.warnings]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the `next` section of the gate view."""
        return {"action": self.action, "state": self.state, "summary": self.summary,
                "then": self.then, "waits": [w.as_dict() for w in self.waits],
                "reason": self.reason, "lines": self.lines(),
                "warnings": list(self.warnings), "response": self.response,
                "deadline": self.deadline}

    def as_view(self) -> NextView:
        """The gate view's `next` section, as its model."""
        return NextView.model_validate(self.as_dict())


def next_step(role: str, record: VersionedBinding, evidence: Evidence, now: float, *,
              paused_by: tuple[str, str] | None = None) -> NextStep:
    """decide() on this evidence, explained; `paused_by` is (actor, reason) of the pause."""
    return explain(decide(role, record, evidence, now), record.binding, evidence, now,
                   paused_by=paused_by)


def explain(decision: Decision, binding: Binding, evidence: Evidence, now: float, *,
            paused_by: tuple[str, str] | None = None) -> NextStep:
    """Put `decision` (decide()'s answer on `evidence`) into plain words."""
    step = _explain(decision, binding, evidence, now, paused_by=paused_by)
    warnings = tuple(f"warning only ({w.policy}): {w.reason}"
                     for w in decision.details.warnings or ())
    found = decision.details.response
    response = None if found is None else found.as_json()
    deadline = deadline_of(binding, now) if decision.action is Action.HOLD else None
    if not warnings and response is None and deadline is None:
        return step
    return dataclasses.replace(step, warnings=warnings, response=response,
                               deadline=None if deadline is None else deadline.as_dict())


def _explain(decision: Decision, binding: Binding, evidence: Evidence, now: float, *,
             paused_by: tuple[str, str] | None = None) -> NextStep:
    then = destination(binding, now)
    if decision.action is Action.ADVANCE:
        # decide()'s reason names the seconds elapsed; the summary stays put while it ticks.
        return NextStep(decision.action.value, ADVANCING,
                        f"advances to {then} at the gatekeeper's next tick", then, (),
                        decision.reason)
    if decision.action is Action.ROLLBACK:
        return NextStep(decision.action.value, ROLLING_BACK,
                        f"rolls back at the gatekeeper's next tick: {decision.reason}",
                        then, (), decision.reason)
    if decision.action is Action.HOLD and decision.details.awaiting_approval:
        return NextStep(decision.action.value, AWAITING_APPROVAL, decision.waits[0].text, then,
                        decision.waits, decision.reason)
    if decision.action is Action.HOLD and decision.details.response is not None \
            and decision.details.response.applied == "hold":
        return NextStep(decision.action.value, HELD,
                        f"{decision.reason}; the gatekeeper pauses the role for a human, who "
                        f"promotes, rolls back or resumes it", then, (), decision.reason)
    if decision.action is Action.HOLD:
        waits = forecast(decision.waits, binding, evidence)
        return NextStep(decision.action.value, WAITING, "; ".join(w.text for w in waits), then,
                        waits, decision.reason)
    return _idle(decision, binding, evidence, now, then, paused_by)


def _idle(decision: Decision, binding: Binding, evidence: Evidence, now: float,
          then: str | None, paused_by: tuple[str, str] | None) -> NextStep:
    """decide() skips the role: say why, and what would move it."""
    action = decision.action.value
    if binding.candidate is None:
        return NextStep(action, STABLE, f"stable on {binding.current}; no rollout in progress",
                        None, (), decision.reason)
    if binding.stage is Stage.ROLLED_BACK:
        return NextStep(action, ROLLED_BACK,
                        f"rolled back: {binding.candidate} is kept but serves nothing; "
                        f"`rolegate promote` retries it in shadow", then, (), decision.reason)
    if binding.stage is Stage.STABLE:
        return NextStep(action, NOT_STARTED,
                        f"candidate {binding.candidate} has not started; `rolegate promote` "
                        f"puts it in shadow", then, (), decision.reason)
    who = f"paused by {paused_by[0]}: {paused_by[1]}" if paused_by else "paused by an operator"
    waits = forecast(decision.waits, binding, evidence)
    return NextStep(action, PAUSED, f"{who}; `rolegate resume` lets the gatekeeper move it",
                    then, waits, decision.reason)


def forecast(waits: tuple[Wait, ...], binding: Binding, evidence: Evidence) -> tuple[Wait, ...]:
    """decide()'s waits as shown: the power wait says about how many more runs it needs.

    An estimate, not a rule (some thirty power computations), so it is made here, for
    the reader, and never on the gatekeeper's tick.
    """
    out = []
    for wait in waits:
        if wait.kind == "power":
            more = more_runs(binding, evidence, evidence.n)
            wait = dataclasses.replace(wait, text=wait.text + (
                f"; about {more} more {judged_arm(binding)} runs at this traffic"
                if more is not None else "; at this stage's traffic it may not get there "
                                         "(its deadline ends the wait)"))
        out.append(wait)
    return tuple(out)


def next_section(record: VersionedBinding, view: GateView, now: float, *,
                 paused_by: tuple[str, str] | None = None) -> NextView:
    """The gate view's `next` section: decide() on the view's own evidence, explained.

    The gatekeeper decides on `evidence_from_view` of this same JSON, so the section
    says what the gatekeeper's next tick will do (unless traces arrive in between).
    """
    return next_step(record.role, record, evidence_from_view(view), now,
                     paused_by=paused_by).as_view()
