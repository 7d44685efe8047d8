"""The rollout stage machine: a table of legal moves, and a pure function applying one.

shadow → canary at each step of the role's ladder → full → stable, one step per
`advance`; any live stage → rolled_back on `rollback`; `pause` and `resume` flip the
role's pause flag in any stage; `approve` records an operator's approval of a canary
or full step that asks for one (`{"share": 0.5, "approval": true}`). The table below
is the whole truth about which move is legal from where, for every event: `apply`
looks the (stage, event) up, makes the move, and checks it landed where the table
says, or raises IllegalTransition leaving the old binding untouched.

Two holds sit on top of the table and bind every writer alike (the gatekeeper, an
operator's token, the CLI, the dashboard): a paused role moves forward for nobody
until it is resumed, and a step asking for approval is not left upward until an
operator approved it. Rollback is never held. The router applies every move through
`apply`, so no token scope and no path gets around them (issue 33).
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


#: The legal moves, as data: (stage, event) -> the stages the move may land in.
#: advance from canary lands on canary (next step) or full (ladder exhausted).
#: Pause and resume leave any stage where it is (the flag is the move); approve
#: leaves a canary or full step where it is (the approval is the move): a step of
#: shadow, stable or rolled_back never asks for one.
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
    **{(stage, flag): frozenset({stage}) for stage in Stage
       for flag in (Event.PAUSE, Event.RESUME)},
    (Stage.CANARY, Event.APPROVE): frozenset({Stage.CANARY}),
    (Stage.FULL, Event.APPROVE): frozenset({Stage.FULL}),
}

#: Events that act on the candidate: without one they have nothing to move.
CANDIDATE_EVENTS = frozenset({Event.ADVANCE, Event.ROLLBACK, Event.SET_SHARE})

#: Events that change the candidate's share or stage forward, so pause and approval hold them.
HELD_EVENTS = frozenset({Event.ADVANCE, Event.SET_SHARE})


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

    `actor` and `reason` are the approval's (APPROVE only). A paused role, or a step
    waiting for its approval, refuses every move forward (`check_holds`).
    """
    move = preview(binding, event, now, share=share, actor=actor, reason=reason)
    if event in HELD_EVENTS:
        check_holds(binding, move.binding, event.value)
    return move


def preview(binding: Binding, event: Event, now: float, *, share: float | None = None,
            actor: str | None = None, reason: str | None = None) -> Move:
    """The move `event` makes by the table alone, pause and approval set aside.

    For telling where a held role goes once freed (`destination`); every write goes
    through `apply`.
    """
    allowed = TRANSITIONS.get((binding.stage, event))
    if allowed is None:
        raise _illegal(binding, event)
    if event in CANDIDATE_EVENTS and binding.candidate is None:
        raise IllegalTransition(
            f"cannot {event.value}: the role has no candidate config",
            stage=binding.stage.value, event=event.value,
        )
    move = _move(binding, event, now, share, actor, reason)
    if move.binding.stage not in allowed:  # the table is the whole truth, the code its servant
        raise IllegalTransition(
            f"cannot {event.value} a role in stage {binding.stage.value!r} "
            f"to {move.binding.stage.value!r}", stage=binding.stage.value, event=event.value)
    return move


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


def _move(binding: Binding, event: Event, now: float, share: float | None,
          actor: str | None, reason: str | None) -> Move:
    """What `event` does to `binding`, once the table allowed it from the binding's stage."""
    if event in (Event.PAUSE, Event.RESUME):
        return _flip_pause(binding, event)
    if event is Event.APPROVE:
        return _approve(binding, now, actor or "anonymous", reason or "approved")
    if event is Event.ROLLBACK:
        new = binding.with_changes(stage=Stage.ROLLED_BACK, share=0.0, stage_since=now)
        return Move(new, f"rolled back {binding.candidate}: share {binding.share:g} -> 0")
    if event is Event.SET_SHARE:
        if share is None or not 0.0 < share <= 1.0:
            raise InvalidInput(f"share: must be within (0, 1], got {share}", field="share")
        return _to_share(binding, share, now)
    return _advance(binding, now)


def _illegal(binding: Binding, event: Event) -> IllegalTransition:
    """The refusal of a move the table does not list from the binding's stage."""
    if event is Event.APPROVE:
        return IllegalTransition(
            f"nothing to approve: the step {binding.stage.value} asks for no approval",
            stage=binding.stage.value, event=event.value)
    return IllegalTransition(f"cannot {event.value} a role in stage {binding.stage.value!r}",
                             stage=binding.stage.value, event=event.value)


def check_holds(binding: Binding, moved: Binding, what: str) -> None:
    """Raise IllegalTransition if pause or a waiting approval holds `binding` from `moved`.

    `what` names the write in the message ("advance", "replace", ...). Only a move
    forward is held: a larger share, or a later stage (full, stable). A share set
    lower, a rollback and a new rollout's shadow are not: the holds are there so the
    candidate's exposure never grows without a human.
    """
    if not _forward(binding, moved):
        return
    if binding.paused:
        raise IllegalTransition(
            f"the role is paused: resume it before it can {what} "
            f"(nobody moves a paused role forward)",
            stage=binding.stage.value, event=what, paused=True)
    if binding.needs_approval() and binding.approved is None:
        where = "full" if binding.stage is Stage.FULL else f"canary {binding.share:g}"
        raise IllegalTransition(
            f"the step {where} waits for an operator's approval: approve it "
            f"(`rolegate approve ROLE --reason ...`) before it can {what}",
            stage=binding.stage.value, event=what, awaiting_approval=True)


#: How far along the rollout each stage is, to tell a move forward from one back.
_ORDER = {Stage.ROLLED_BACK: 0, Stage.STABLE: 0, Stage.SHADOW: 1, Stage.CANARY: 2,
          Stage.FULL: 3}


def _forward(binding: Binding, moved: Binding) -> bool:
    """Whether `moved` serves the candidate to more traffic, or stands further along."""
    if moved.stage is Stage.STABLE and binding.stage is Stage.FULL:
        return True
    if moved.candidate != binding.candidate or moved.stage is Stage.SHADOW:
        return False
    return (_ORDER[moved.stage], moved.share) > (_ORDER[binding.stage], binding.share)


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


def _flip_pause(binding: Binding, event: Event) -> Move:
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
