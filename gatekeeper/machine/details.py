"""The figures behind a decision (`Decision.details`), as a model. Pure.

Each of decide()'s rules records what it read (the counts, the e-value, the
response applied, the waits' figures); the gatekeeper's loop adds what became of
the decision (`outcome`). The JSON (`as_json`) is what a history entry keeps
under `details.gatekeeper`, what a webhook event and `--dry-run` print: only the
figures a decision set, so a hold on too few runs has no `response` key, as
before. Reading by key (`details["response"]`, `details.get(...)`, `"x" in
details`) reads that JSON, as a history entry's reader does; the code reads the
fields. Figures a caller adds beyond these (`Evidence.figures`) stay, as extras.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from gatekeeper.view_model.criteria import CriterionKeyView
from gatekeeper.view_model.next import ResponseView
from gatekeeper.view_model.reports import ReportsView
from gatekeeper.view_model.units import Number, UnitTestView

#: The loop's outcomes of a decision it acted on.
OUTCOMES = ("applied", "refused", "dry_run", "failed")


class WarningView(BaseModel):
    """A rule that would have rolled back and that gate.responses only warns on."""

    model_config = ConfigDict(frozen=True)

    rule: str
    #: The policy entry that chose "warn".
    policy: str
    reason: str


class DecisionDetails(BaseModel):
    """The figures behind one decision; every field optional, served only when set."""

    model_config = ConfigDict(extra="allow", frozen=True, ser_json_inf_nan="constants")

    # -- every decision: the judged arm's verdict and counts, current's (decide._numbers)
    verdict: str | None = None
    n: int | None = None
    passes: int | None = None
    current_n: int | None = None
    current_passes: int | None = None
    #: Shadow: the paired report's pairs, flips and McNemar figures (those it gave).
    paired: dict[str, Any] | None = None
    #: Rules gate.responses only warned on.
    warnings: list[WarningView] | None = None
    # -- a rule that acted
    #: The response applied (rollback, hold) and the policy entry that chose it.
    response: ResponseView | None = None
    #: The gate's reasons that failed the stage (zero tolerance, or at the stage's end).
    gate_reasons: list[str] | None = None
    #: The criterion keys whose tests acted.
    criteria: list[CriterionKeyView] | None = None
    #: The unit test's reading, when it rejected.
    units: UnitTestView | None = None
    #: The metrics whose CUSUM alarmed on the candidate.
    drift_alarms: list[str] | None = None
    #: The rollout's sequential e-value (`stats.budget.Combined.as_dict`; with p0 when it
    #: rejected).
    sequential: dict[str, Any] | None = None
    #: The run-level rule a unit-test hold stands in for (keys repeat).
    held_by_units: str | None = None
    #: The gate view's reports section, when the report rate held or rolled back.
    reports: ReportsView | None = None
    # -- a hold, or the advance
    #: The power hold's figures (`stats.power.Power.as_dict`).
    power: dict[str, Any] | None = None
    #: The stage's age and the minimum it must last.
    elapsed_s: Number | None = None
    required_s: Number | None = None
    #: True: the stage's deadline passed (its action is the response).
    deadline: bool | None = None
    #: True: the gate passed and the step waits for an operator's approval.
    awaiting_approval: bool | None = None
    # -- what the gatekeeper's loop made of it
    #: One of OUTCOMES.
    outcome: str | None = None
    new_version: int | None = None
    #: Why a move failed or was refused (the API's error, or its message).
    error: str | dict[str, Any] | None = None
    #: True: the role's gate view could not be read, so it was not judged.
    unjudged: bool | None = None

    def as_json(self) -> dict[str, Any]:
        """JSON-ready: the figures set, as a history entry keeps them."""
        return self.model_dump(mode="json", exclude_unset=True)

    def with_(self, **figures: Any) -> DecisionDetails:
        """These details with `figures` set too (the loop's outcome)."""
        return type(self).model_validate({**self.as_json(), **figures})

    # Reading by key reads the served JSON (a history entry's, a webhook's, a test's).
    def __getitem__(self, key: str) -> Any:
        return self.as_json()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.as_json()

    def get(self, key: str, default: Any = None) -> Any:
        """The served JSON's `key`, else `default`."""
        return self.as_json().get(key, default)


class EntryDetails(BaseModel):
    """A history entry's `details`: what its writer recorded, a decision's under `gatekeeper`.

    The router validates a move's `details` with it (the gatekeeper sends its decision's
    `as_json` under `gatekeeper`) and keeps the JSON (`as_json`), so every entry served
    has the shape the OpenAPI document gives it. Other keys (a tripwire's run id, a
    restore's version, an operator's notes) are the writer's own, kept as they came.
    """

    model_config = ConfigDict(extra="allow", frozen=True, ser_json_inf_nan="constants")

    #: The gatekeeper's decision that made the move.
    gatekeeper: DecisionDetails | None = None
    #: The JSON its writer sent, when it was validated from JSON (`_kept_as_sent`).
    _sent: dict[str, Any] | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _kept_as_sent(cls, value: Any, handler: ModelWrapValidatorHandler[EntryDetails]
                      ) -> EntryDetails:
        """Validated from JSON (a move's body): the JSON is kept for `as_json`. A figure
        given as another JSON type (true for a count, "0.5" for a rate, "yes" for a flag) is
        refused naming it, as in every body."""
        if isinstance(value, dict) and isinstance(value.get("gatekeeper"), dict):
            refused = not_json_types(DecisionDetails, value["gatekeeper"])
            if refused:
                raise ValidationError.from_exception_data(cls.__name__, [
                    InitErrorDetails(type=wrong_json_type(expected, given),
                                     loc=("gatekeeper", *loc), input=given)
                    for loc, given, expected in refused])
        details = handler(value)
        if isinstance(value, dict):
            details._sent = value
        return details

    def as_json(self) -> dict[str, Any]:
        """JSON-ready: the keys given, as the history entry keeps them.

        Sent over the wire, each figure the model reads is kept as it read it (a count
        sent as 30.0 is kept as 30, as the schema gives it), and every key it does not
        know is kept as it came: the decision's sections ignore unknown keys (a newer
        gatekeeper adds some), and the router must not drop what it acknowledged.
        """
        read = self.model_dump(mode="json", exclude_unset=True)
        kept: dict[str, Any] = read if self._sent is None else _beside(self._sent, read)
        return kept


def wrong_json_type(expected: str, given: Any) -> PydanticCustomError:
    """The error a figure sent as another JSON type gets, quoting it as JSON."""
    return PydanticCustomError("json_type", "expected {expected}, got {given}",
                               {"expected": expected, "given": json.dumps(given)})


#: The strict-mode errors of a scalar given as another JSON scalar, and what was expected.
_EXPECTED = {"int_type": "a number", "float_type": "a number", "bool_type": "true or false"}


def _another_scalar(kind: str, given: Any) -> bool:
    """Whether strict mode's `kind` error is about a JSON scalar of another type: true/false
    or text for a number, text or a number for true/false (not 30.0 for an integer)."""
    if kind in ("int_type", "float_type"):
        return isinstance(given, bool | str)
    return kind == "bool_type" and isinstance(given, str | int | float)


def not_json_types(model: type[BaseModel], value: dict[str, Any]
                   ) -> list[tuple[tuple[int | str, ...], Any, str]]:
    """Where `value` gives a number field of `model` as true/false or as text, or a boolean
    field as text or a number: (loc, value).

    Pydantic's lax mode, which the details are read in (a count sent as 30.0 is 30, as
    JSON Schema says), would take true as 1, "0.5" as 0.5 and "yes" or 1 as true; strict
    mode names them. Its other complaints (30.0 for an integer, a missing key) are lax
    mode's to judge.
    """
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return []  # not JSON: lax validation names what is wrong
    try:
        model.model_validate_json(text, strict=True)
    except ValidationError as exc:
        return [(error["loc"], error["input"], _EXPECTED[error["type"]])
                for error in exc.errors() if _another_scalar(error["type"], error["input"])]
    return []


def _beside(sent: Any, read: Any) -> Any:
    """`read` (a model's dump of `sent`), with the keys of `sent` it does not hold added."""
    if isinstance(sent, dict) and isinstance(read, dict):
        return {**sent, **{key: _beside(sent.get(key), value) for key, value in read.items()}}
    if isinstance(sent, list) and isinstance(read, list) and len(sent) == len(read):
        return [_beside(one, value) for one, value in zip(sent, read)]
    return read
