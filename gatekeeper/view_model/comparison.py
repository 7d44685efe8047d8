"""The gate view's `comparison` and `previous` sections (`gatekeeper.view.arms`, `.outlook`).

`comparison`: each arm's pass rate against current's over the same period, and
its cost and tokens beside current's; `previous`: for a rolled-back role, the
stage the rollback ended, its arms and comparison, and the rollback's entry.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from bindings.models import Stage
from gatekeeper.view_model.arms import ArmView, arms_view
from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import Number


class WinsorizedView(Section):
    """Candidate against current: means capped at the pooled quantile, the raw means beside."""

    quantile: Number
    cap: Number | None
    candidate_mean: Number | None
    current_mean: Number | None
    #: candidate_mean / current_mean - 1 (null: no current mean).
    change: Number | None
    candidate_raw_mean: Number | None
    current_raw_mean: Number | None
    #: For tokens: the change is over the warning level; absent for cost.
    warning: bool | None = Field(None, exclude_if=lambda value: value is None)


class ComparisonView(Section):
    """One arm against current over the same period (`gate.Comparison.to_json`)."""

    #: Its pass rate minus current's, and the 95% (Newcombe) interval (null: no runs).
    difference: Number | None
    interval: list[Number] | None
    n_candidate: int
    n_current: int
    candidate_pass_rate: Number | None
    current_pass_rate: Number | None
    #: Both sides have at least one trace.
    sufficient: bool
    cost_usd: WinsorizedView | None
    tokens: WinsorizedView | None


class PreviousWindowView(Section):
    """The ended stage's window: since when, until the rollback, its epoch."""

    since: Number | None
    until: Number
    epoch: str


class RollbackEntryView(Section):
    """The history entry of the rollback that ended the stage."""

    version: int
    time: Number
    actor: str
    action: str
    reason: str
    #: The entry's details as written (a gatekeeper's: its decision's figures).
    details: dict[str, Any]


class PreviousView(Section):
    """`previous`: the evidence of the stage a rollback ended."""

    version: int
    stage: Stage
    share: Number
    window: PreviousWindowView
    rollback: RollbackEntryView
    arms: dict[str, ArmView]
    comparison: dict[str, ComparisonView]


def comparison_view(section: dict[str, dict[str, Any]]) -> dict[str, ComparisonView]:
    """The `comparison` section's JSON as the models."""
    return {arm: ComparisonView.model_validate(figures) for arm, figures in section.items()}


def previous_view(section: dict[str, Any] | None) -> PreviousView | None:
    """The `previous` section's JSON as the model (its arms keep every figure: `arm_view`)."""
    if section is None:
        return None
    return PreviousView.model_construct(**{
        **section, "stage": Stage(section["stage"]),
        "window": PreviousWindowView.model_validate(section["window"]),
        "rollback": RollbackEntryView.model_validate(section["rollback"]),
        "arms": arms_view(section["arms"]), "comparison": comparison_view(section["comparison"])})
