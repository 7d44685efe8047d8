"""What the gatekeeper will do next with a role, and what it waits for, in plain words. Pure.

The action is decide()'s own, taken on the same evidence, so the status command,
the dashboard and the gatekeeper can never disagree about what happens next.
This module only explains it: each condition a held stage still waits for, with
its numbers and the setting behind them ("needs 140 more candidate runs
(min_samples 200)", "holds until 12:05 UTC (min_stage_seconds)"), and where the
next advance goes ("next: canary 0.5").
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bindings.errors import IllegalTransition
from bindings.models import Binding, Stage, VersionedBinding
from gatekeeper.machine.deadline import deadline_of
from gatekeeper.machine.decide import (
    Action,
    Decision,
    Evidence,
    decide,
    evidence_from_view,
    shadow_pairs_needed,
)
from gatekeeper.machine.durations import stage_minimum
from gatekeeper.machine.power_hold import more_runs, rollout_power
from gatekeeper.machine.stages import Event, preview

#: What a role's rollout is doing, as one word a script can branch on.
WAITING, ADVANCING, ROLLING_BACK, PAUSED = "waiting", "advancing", "rolling_back", "paused"
#: The gate passed on a step that asks a human first (`{"share": 0.5, "approval": true}`).
AWAITING_APPROVAL = "awaiting_approval"
#: gate.responses held the rollout: a rule would have rolled it back.
HELD = "held"
STABLE, ROLLED_BACK, NOT_STARTED = "stable", "rolled_back", "not_started"
#: Every state `next.state` takes: the OpenAPI enum is this tuple (router.openapi.more).
STATES = (WAITING, ADVANCING, ROLLING_BACK, PAUSED, AWAITING_APPROVAL, HELD, STABLE,
          ROLLED_BACK, NOT_STARTED)
#: Every kind of Wait, in the order waits_of lists them ("approval" on its own; "other":
#: a hold decide() explains only in its reason). A Wait of another kind is refused.
WAIT_KINDS = ("runs", "pairs", "time", "power", "approval", "other")


@dataclass(frozen=True)
class Wait:
    """One condition a stage still waits for before it may advance."""

    #: One of WAIT_KINDS.
    kind: str
    #: The binding setting that asks for it: min_samples, min_stage_seconds, ...
    setting: str | None
    have: float
    need: float
    text: str
    #: For "time": when the wait ends, in epoch seconds.
    until: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in WAIT_KINDS:  # the OpenAPI enum is WAIT_KINDS: keep them one list
            raise ValueError(f"Wait kind {self.kind!r} is not one of {WAIT_KINDS}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"kind": self.kind, "setting": self.setting, "have": self.have,
                "need": self.need, "until": self.until, "text": self.text}


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


def next_step(role: str, record: VersionedBinding, evidence: Evidence, now: float, *,
              paused_by: tuple[str, str] | None = None) -> NextStep:
    """decide() on this evidence, explained; `paused_by` is (actor, reason) of the pause."""
    return explain(decide(role, record, evidence, now), record.binding, evidence, now,
                   paused_by=paused_by)


def explain(decision: Decision, binding: Binding, evidence: Evidence, now: float, *,
            paused_by: tuple[str, str] | None = None) -> NextStep:
    """Put `decision` (decide()'s answer on `evidence`) into plain words."""
    step = _explain(decision, binding, evidence, now, paused_by=paused_by)
    warnings = tuple(f"warning only ({w.get('policy')}): {w.get('reason')}"
                     for w in decision.details.get("warnings", []))
    response = decision.details.get("response")
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
    if decision.action is Action.HOLD and decision.details.get("awaiting_approval"):
        text = (f"awaits an operator's approval to advance to {then}: the gate passed; "
                f"`rolegate approve {decision.role} --reason ...` or the page's Approve button")
        return NextStep(decision.action.value, AWAITING_APPROVAL, text, then,
                        (Wait("approval", None, 0, 1, text),), decision.reason)
    if decision.action is Action.HOLD and (decision.details.get("response") or {}).get(
            "applied") == "hold":
        return NextStep(decision.action.value, HELD,
                        f"{decision.reason}; the gatekeeper pauses the role for a human, who "
                        f"promotes, rolls back or resumes it", then, (), decision.reason)
    if decision.action is Action.HOLD:
        waits = waits_of(binding, evidence, now)
        if not waits:
            waits = (Wait("other", None, 0, 0, f"holds: {decision.reason}"),)
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
    waits = waits_of(binding, evidence, now)
    return NextStep(action, PAUSED, f"{who}; `rolegate resume` lets the gatekeeper move it",
                    then, waits, decision.reason)


def waits_of(binding: Binding, evidence: Evidence, now: float) -> tuple[Wait, ...]:
    """Every condition of decide()'s holds the stage has not met yet, in decide()'s order."""
    waits: list[Wait] = []
    thresholds = binding.gate.thresholds
    arm = "shadow" if binding.stage is Stage.SHADOW else "candidate"
    if evidence.verdict == "insufficient_data":
        need = thresholds.min_samples
        if evidence.n < need:
            waits.append(Wait("runs", "min_samples", evidence.n, need,
                              f"needs {need - evidence.n} more {arm} runs "
                              f"(min_samples {need})"))
        else:
            waits.append(Wait("runs", None, evidence.n, need,
                              "waiting for data: " + "; ".join(evidence.reasons)))
    paired = evidence.paired if binding.stage is Stage.SHADOW else None
    if paired is not None:
        pairs, need = int(paired.get("pairs", 0)), shadow_pairs_needed(thresholds)
        setting = "min_shadow_pairs" if thresholds.min_shadow_pairs is not None \
            else "min_samples"
        if pairs < need:
            waits.append(Wait("pairs", setting, pairs, need,
                              f"needs {need - pairs} more paired runs ({setting} {need})"))
    minimum = stage_minimum(binding)
    since = binding.stage_since if binding.stage_since is not None else now
    if now - since < minimum.seconds:
        until = since + minimum.seconds
        waits.append(Wait("time", minimum.setting, round(now - since, 3), minimum.seconds,
                          f"holds until {clock_time(until, now)} ({minimum.setting})",
                          until=until))
    power = rollout_power(binding, evidence)
    # Before a cell both arms ran in has closed there is nothing to size: the line would
    # be noise beside the runs and time the stage still waits for.
    if power is not None and not power.enough and (power.sd > 0.0 or not waits):
        more = more_runs(binding, evidence, evidence.n)
        ahead = (f"; about {more} more {arm} runs at this traffic" if more is not None
                 else "; at this stage's traffic it may not get there (its deadline ends "
                      "the wait)")
        waits.append(Wait("power", "gate.power.min_power", round(power.power, 3),
                          power.needed, power.reason() + ahead))
    return tuple(waits)


def destination(binding: Binding, now: float) -> str | None:
    """Where one advance (promote) takes the role, by the stage table itself; None: nowhere.

    Pause and approval set aside: this names where the role goes once they are lifted.
    """
    try:
        moved = preview(binding, Event.ADVANCE, now).binding
    except IllegalTransition:
        return None
    return stage_label(moved)


def stage_label(binding: Binding) -> str:
    """A stage in the words an operator uses: "canary 0.5", "full", "stable", ..."""
    if binding.stage is Stage.CANARY:
        return f"canary {binding.share:g}"
    if binding.stage is Stage.STABLE:
        return f"stable ({binding.current})"
    return str(binding.stage.value).replace("_", " ")


def clock_time(moment: float, now: float) -> str:
    """`moment` as "12:05 UTC", with the date when it is not today (UTC).

    Rounded up to the minute: "holds until 12:05" must not read as already over at 12:04:30.
    """
    moment = math.ceil(moment / 60) * 60
    day, today = time.gmtime(moment)[:3], time.gmtime(now)[:3]
    form = "%H:%M UTC" if day == today else "%Y-%m-%d %H:%M UTC"
    return time.strftime(form, time.gmtime(moment))


def next_section(record: VersionedBinding, view: Mapping[str, Any], now: float, *,
                 paused_by: tuple[str, str] | None = None) -> dict[str, Any]:
    """The gate view's `next` section: decide() on the view's own evidence, explained.

    The gatekeeper decides on `evidence_from_view` of this same JSON, so the section
    says what the gatekeeper's next tick will do (unless traces arrive in between).
    """
    return next_step(record.role, record, evidence_from_view(view), now,
                     paused_by=paused_by).as_dict()
