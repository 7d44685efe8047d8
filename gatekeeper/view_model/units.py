"""The gate view's `units` and `difference` sections (`gatekeeper.view.units`, `.difference`).

`units`: the unit test over the rollout's live stages (`gatekeeper.stats.units`);
`difference`: candidate - current per metric, with always-valid intervals.
"""

from __future__ import annotations

from pydantic import Field

from gatekeeper.view_model.section import Section

#: A figure that is a whole number when it comes out whole (served as it was computed).
Number = int | float


class UnitMetricView(Section):
    """One metric's share of the unit test's e-value."""

    metric: str
    weight: Number
    log_e: Number
    candidate_units: int
    current_units: int


class UnitTestView(Section):
    """The unit test's reading (`stats.units.UnitVerdict`)."""

    log_e: Number
    threshold: Number
    alpha: Number
    reject: bool
    horizon: Number | None
    leading: str | None
    metrics: list[UnitMetricView]
    #: Units carry several runs each: the run-level tests hold and never roll back.
    repeats: bool
    repeats_why: str


class StretchView(Section):
    """One live stage of the rollout: since when, at what share."""

    since: Number
    share: Number


class UnitArmView(Section):
    """One arm's runs, distinct units and p99 report lag over the rollout."""

    runs: int
    units: int
    lag_p99_s: Number | None


class UnitLimitsView(Section):
    """The rollout's slow and costly limits, fixed once from current's runs (null: not yet)."""

    slow_ms: int | None
    costly_micros: int | None
    from_s: int | None


class UnitsView(Section):
    """`units`: the unit test over the rollout's live stages."""

    rollout: str
    stretches: list[StretchView]
    arms: dict[str, UnitArmView]
    limits: UnitLimitsView
    test: UnitTestView
    #: The rollback reason when the test rejects the candidate, else null.
    reason: str | None


class DifferenceView(Section):
    """One metric of `difference`: candidate - current, with its always-valid interval."""

    metric: str
    estimate: Number | None
    lower: Number | None
    upper: Number | None
    confidence: Number
    #: The judged arm: shadow in shadow, else the candidate.
    arm: str
    #: Why the interval is narrower than the evidence (keys carry several runs), or null.
    note: str | None = Field(None)
