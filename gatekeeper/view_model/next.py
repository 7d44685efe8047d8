"""The gate view's `next` section: decide()'s action on the view, explained (`machine.next_step`)."""

from __future__ import annotations

from typing import get_args

from pydantic import Field
from pydantic.config import JsonDict

from bindings.models import Thresholds
from bindings.responses_policy import RESPONSE_NAMES, RESPONSE_RULES
from gatekeeper.heartbeat import OK
from gatekeeper.machine.deadline import DEADLINE
from gatekeeper.machine.holds import WAIT_KINDS
from gatekeeper.machine.vocabulary import STATES, Action
from gatekeeper.view_model.keeper import GatekeeperView
from gatekeeper.view_model.section import Section


def _enum(values: tuple[str, ...]) -> JsonDict:
    """A string field's OpenAPI enum, from the code's own tuple."""
    return {"enum": list(values)}


class WaitView(Section):
    """One condition a held stage still waits for (`machine.holds.Wait`)."""

    kind: str = Field(json_schema_extra=_enum(WAIT_KINDS))
    #: The binding setting that asks for it: min_samples, min_stage_seconds, ...
    setting: str | None
    have: int | float
    need: int | float
    #: For "time": when the wait ends, in epoch seconds.
    until: float | None
    text: str


class ResponseView(Section):
    """The graded response decide() applied, for one of its rules or the stage's deadline."""

    rule: str = Field(json_schema_extra=_enum((*RESPONSE_RULES, DEADLINE)))
    applied: str = Field(json_schema_extra=_enum(RESPONSE_NAMES))
    policy: str


class DeadlineView(Section):
    """When a live stage's deadline falls and what it does then (`machine.deadline`)."""

    at: float
    action: str = Field(json_schema_extra=_enum(
        get_args(Thresholds.model_fields["deadline_action"].annotation)))
    seconds: float


class NextView(Section):
    """decide()'s action on this view, explained: the state, what it waits for, what comes next."""

    action: Action
    state: str = Field(json_schema_extra=_enum(STATES))
    summary: str
    #: Where the next advance takes the role ("canary 0.5", "full", ...), if anywhere.
    then: str | None
    waits: list[WaitView]
    #: decide()'s own reason, verbatim.
    reason: str
    lines: list[str]
    #: Rules that would have rolled back and that gate.responses only warns on.
    warnings: list[str] = []
    response: ResponseView | None = None
    deadline: DeadlineView | None = None
    #: True when no gatekeeper is there to take the step (`annotate_next`);
    #: absent otherwise.
    unattended: bool | None = Field(None, exclude_if=lambda value: value is None)


def annotate_next(next_section: NextView, keeper: GatekeeperView) -> NextView:
    """The gate view's `next`, saying plainly when no gatekeeper will take that step."""
    action = next_section.action
    if keeper.status == OK or action not in (Action.ADVANCE, Action.ROLLBACK):
        return next_section
    if action is Action.ADVANCE:
        then = next_section.then
        said = f"would advance{f' to {then}' if then else ''} now"
    else:
        reason = next_section.reason
        said = f"would roll back now{f' ({reason})' if reason else ''}"
    text = f"{said}, but {keeper.text}"
    return next_section.model_copy(update={"summary": text, "lines": [text],
                                           "unattended": True})
