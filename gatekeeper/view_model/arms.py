"""The gate view's `arms` section: each arm's verdict and figures (`gatekeeper.view.arms`).

Typed where it is read (the verdict, its reasons, n and passes: decide()'s
evidence); the gate's other figures (pass rate, tool tally, latency, cost, the
reporters, the runs counted missing) pass through as they are, as the arm's
extra keys: `gate.metrics` names them.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import Number


class ReasonView(Section):
    """One reason behind a verdict (`gate.Reason`): a stable code, a sentence, value, limit."""

    code: str
    message: str
    value: Number | None
    limit: Number | None


class ArmView(Section):
    """One arm's verdict, its reasons and counts; every other figure of the gate beside them."""

    model_config = ConfigDict(extra="allow")

    verdict: str = Field(json_schema_extra={"enum": ["pass", "fail", "insufficient_data"]})
    reasons: list[ReasonView]
    #: The arm's traces (and passes) in the stage's window.
    n: int
    passes: int


def arm_view(figures: dict[str, Any]) -> ArmView:
    """The model of one arm's figures (`arms.arms_section`'s): trusted, constructed."""
    reasons = [ReasonView.model_construct(**reason) for reason in figures.get("reasons", ())]
    return ArmView.model_construct(**{**figures, "reasons": reasons})


def arms_view(arms: dict[str, dict[str, Any]]) -> dict[str, ArmView]:
    """`arm_view` of each arm."""
    return {arm: arm_view(figures) for arm, figures in arms.items()}
