"""A stage that cannot decide says so and ends: the stage deadline. Pure.

decide() holds a stage while it waits for runs, pairs or a verdict either way.
With too little traffic, or a candidate whose pass rate sits right at
`min_pass_rate`, that wait could last for days: 18 of 100 healthy rollouts on
a role passing just over the default floor were still not stable after 24 h.
So a stage has a deadline: `thresholds.stage_deadline_seconds` after its
minimum duration (`durations.stage_minimum`, so a 2-hour bake is not cut
short); past it, a stage decide() would still hold takes
`thresholds.deadline_action`, with the reason:

- `hold` (the default): the gatekeeper pauses the role with the reason (a
  history entry, a `hold` webhook event) for a human to promote, roll back or
  resume; resuming starts no new clock, so a resumed stage that still cannot
  decide is paused again at the next tick;
- `rollback`: the candidate is rolled back, as Flagger does at its
  progressDeadlineSeconds and LaunchDarkly's guarded rollouts do once extended.

A stage waiting for a human's approval is not overdue: the human is the wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bindings.models import Binding
from gatekeeper.machine.durations import stage_minimum
from gatekeeper.machine.responses import HELD, HOLD, response_details

#: The rule name decide() reports (in details.response) for a deadline's action.
DEADLINE = "deadline"
#: Where the action comes from, as decide()'s responses name their policy source.
DEADLINE_SOURCE = "thresholds.deadline_action"


@dataclass(frozen=True)
class Deadline:
    """When the stage's deadline falls, and what happens then."""

    at: float
    action: str
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for a decision's details."""
        return {"at": self.at, "action": self.action, "seconds": self.seconds}


def deadline_of(binding: Binding, now: float) -> Deadline | None:
    """The stage's deadline (its start, plus its minimum, plus stage_deadline_seconds)."""
    thresholds = binding.gate.thresholds
    if thresholds.stage_deadline_seconds is None:
        return None
    since = binding.stage_since if binding.stage_since is not None else now
    at = since + stage_minimum(binding).seconds + thresholds.stage_deadline_seconds
    return Deadline(at, thresholds.deadline_action, thresholds.stage_deadline_seconds)


@dataclass(frozen=True)
class Overdue:
    """A held stage past its deadline: what decide() does instead, and why."""

    #: True: hold for a human (the gatekeeper pauses the role); False: roll back.
    hold: bool
    reason: str
    #: For the decision's details: the response applied, as graded responses report it.
    details: dict[str, Any]


def overdue(binding: Binding, now: float, waiting_for: str) -> Overdue | None:
    """What a stage held for `waiting_for` does now its deadline passed; None while it may wait."""
    deadline = deadline_of(binding, now)
    if deadline is None or now < deadline.at:
        return None
    since = binding.stage_since if binding.stage_since is not None else now
    reason = (f"stage deadline passed: undecided after {now - since:.0f}s "
              f"(its minimum plus stage_deadline_seconds {deadline.seconds:g}), "
              f"still {waiting_for}; deadline_action {deadline.action}")
    hold = deadline.action == HOLD
    return Overdue(hold, f"{HELD} ({DEADLINE_SOURCE}): {reason}" if hold else reason,
                   {**response_details(DEADLINE, deadline.action, DEADLINE_SOURCE),
                    "deadline": True})
