"""The rollout stage machine: a table of legal moves, and a pure function applying one.

shadow → canary at each step of the role's ladder → full → stable, one step per
`advance`; any live stage → rolled_back on `rollback`; `approve` records an
operator's approval of a step that asks for one (`{"share": 0.5, "approval": true}`). The table below is the
whole truth about which move is legal from where; `apply` consults it and either
returns a new binding or raises IllegalTransition leaving the old one untouched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from bindings.errors import IllegalTransition, InvalidInput
from bindings.models import Approval, Binding, Stage


class Event(str, enum.Enum):
    """What can happen to a role's rollout."""

    ADVANCE = "advance"        # one step forward: promote
    ROLLBACK = "rollback"      # zero the canary, keep the candidate for inspection
    SET_SHARE = "set_share"    # an operator sets the canary share directly
    PAUSE = "pause"
    RESUME = "resume"
    APPROVE = "approve"        # an operator lets a step that asks for approval advance


#: The legal moves, as data. `None` as a source means "any stage".
#: advance from canary lands on canary (next step) or full (ladder exhausted).
TRANSITIONS: dict[tuple[Stage, Event], frozenset[Stage]] = {
    (Stage.STABLE, Event.ADVANCE): frozenset({Stage.SHADOW}),
    (Stage.ROLLED_BACK, Event.ADVANCE): frozenset({Stage.SHADOW}),
    (Stage.SHADOW, Event.ADVANCE): frozenset({Stage.CANARY, Stage.FULL}),
    (Stage.CANARY, Event.ADVANCE): frozenset({Stage.CANARY, Stage.FULL}),
    (Stage.FULL, Event.ADVANCE): frozenset({Stage.STABLE}),
    (Stage.SHADOW, Event.ROLLBACK): frozenset({Stage.ROLLED_BACK}),
    (Stage.CANARY, Event.ROLLBACK): frozenset({Stage.ROLLED_BACK}),
    (Stage.FULL, Event.ROLLBACK): frozenset({Stage.ROLLED_BACK}),
    (Stage.STABLE, Event.SET_SHARE): frozenset({Stage.CANARY, Stage.FULL}),
    (Stage.SHADOW, Event.SET_SHARE): frozenset({Stage.CANARY, Stage.FULL}),
    (Stage.CANARY, Event.SET_SHARE): frozenset({Stage.CANARY, Stage.FULL}),
    (Stage.FULL, Event.SET_SHARE): frozenset({Stage.CANARY, Stage.FULL}),
    (Stage.ROLLED_BACK, Event.SET_SHARE): frozenset({Stage.CANARY, Stage.FULL}),
}

#: Events that flip the pause flag and leave the stage where it is.
FLAG_EVENTS = frozenset({Event.PAUSE, Event.RESUME})


@dataclass(frozen=True)
class Move:
    """The result of applying an event: the new binding and a one-line summary."""

    binding: Binding
    summary: str


def next_share(binding: Binding) -> float:
    """The canary share one step up the ladder from where the binding stands."""
    if binding.stage is Stage.SHADOW:
        return binding.step_shares[0]
    for step in binding.step_shares:
        if step > binding.share:
            return step
    return 1.0


def apply(binding: Binding, event: Event, now: float, *, share: float | None = None,
          actor: str | None = None, reason: str | None = None) -> Move:
    """Apply `event` to `binding` at time `now`; raise IllegalTransition if the table forbids it.

    `actor` and `reason` are the approval's (APPROVE only).
    """
    if event in FLAG_EVENTS:
        return _flip_pause(binding, event, now)
    if event is Event.APPROVE:
        return _approve(binding, now, actor or "anonymous", reason or "approved")
    allowed = TRANSITIONS.get((binding.stage, event))
    if allowed is None:
        raise IllegalTransition(
            f"cannot {event.value} a role in stage {binding.stage.value!r}",
            stage=binding.stage.value, event=event.value,
        )
    if binding.candidate is None:
        raise IllegalTransition(
            f"cannot {event.value}: the role has no candidate config",
            stage=binding.stage.value, event=event.value,
        )
    if event is Event.ROLLBACK:
        new = binding.with_changes(stage=Stage.ROLLED_BACK, share=0.0, stage_since=now)
        return Move(new, f"rolled back {binding.candidate}: share {binding.share:g} -> 0")
    if event is Event.SET_SHARE:
        if share is None or not 0.0 < share <= 1.0:
            raise InvalidInput(f"share: must be within (0, 1], got {share}", field="share")
        return _to_share(binding, share, now)
    return _advance(binding, now)


def _advance(binding: Binding, now: float) -> Move:
    candidate = binding.candidate
    assert candidate is not None
    if binding.stage in (Stage.STABLE, Stage.ROLLED_BACK):
        new = binding.with_changes(stage=Stage.SHADOW, share=0.0, stage_since=now)
        return Move(new, f"{candidate} enters shadow beside {binding.current}")
    if binding.stage is Stage.FULL:
        new = binding.with_changes(
            stage=Stage.STABLE, current=candidate, candidate=None, share=0.0, stage_since=now
        )
        return Move(new, f"{candidate} is now stable (was {binding.current})")
    return _to_share(binding, next_share(binding), now)


def _to_share(binding: Binding, share: float, now: float) -> Move:
    stage = Stage.FULL if share >= 1.0 else Stage.CANARY
    new = binding.with_changes(stage=stage, share=1.0 if stage is Stage.FULL else share,
                               stage_since=now)
    where = "full" if stage is Stage.FULL else f"canary {share:g}"
    return Move(new, f"{binding.candidate}: {binding.stage.value} {binding.share:g} -> {where}")


def _flip_pause(binding: Binding, event: Event, now: float) -> Move:
    want = event is Event.PAUSE
    if binding.paused == want:
        raise IllegalTransition(
            f"role is already {'paused' if want else 'running'}", event=event.value
        )
    return Move(binding.with_changes(paused=want), "paused" if want else "resumed")


def _approve(binding: Binding, now: float, actor: str, reason: str) -> Move:
    if not binding.needs_approval():
        where = binding.stage.value + (f" {binding.share:g}" if binding.stage is Stage.CANARY
                                       else "")
        raise IllegalTransition(f"nothing to approve: the step {where} asks for no approval",
                                stage=binding.stage.value, event=Event.APPROVE.value)
    if binding.approved is not None:
        raise IllegalTransition(f"this step is already approved by {binding.approved.actor}",
                                stage=binding.stage.value, event=Event.APPROVE.value)
    approval = Approval(actor=actor, time=now, reason=reason)
    return Move(binding.with_changes(approved=approval.model_dump()),
                f"{binding.candidate}: {binding.stage.value} approved by {actor}")
