"""The gate view's `reports` section: runs assigned against runs reported, per arm.

Built by `gatekeeper.view.reports` (`stats.reports.ReportCheck.as_dict`, the
missing-runs policy, the runs matched by id); decide() reads the verdict and
its reason (`gatekeeper.machine.reports`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gatekeeper.stats.reports import BOTH_SHORT, INSUFFICIENT, LAGGING, OK, SHORT
from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import Number


class ArmCountsView(Section):
    """A count per arm: the judged arm's (as "candidate") and current's."""

    candidate: int
    current: int


class ArmRatesView(Section):
    """A rate per arm (null: nothing assigned)."""

    candidate: Number | None
    current: Number | None


class ReporterView(Section):
    """One reporter's own assignments against its own reports (`ReporterFigures.as_dict`)."""

    assigned: ArmCountsView
    reported: ArmCountsView
    #: It reports under the minimum rate of its own current runs.
    short: bool
    #: Its missing runs count (it reports its own current runs).
    counted: bool


class MissingRunsView(Section):
    """The `gate.reports.missing_runs` policy, and whether it applies."""

    policy: str
    applied: bool
    why_not: str | None
    counted_reporters: list[str] = []
    #: Runs assigned and never reported, over the counted reporters.
    missing: ArmCountsView = ArmCountsView(candidate=0, current=0)


class RunFiguresView(Section):
    """One arm's runs with run ids (`stats.matching.run_figures`)."""

    #: Runs assigned with a run id, past the grace.
    with_id: int
    #: Of those, reported under their own id.
    matched: int
    #: Of those, whose id never reported.
    missing: int
    #: Runs within the grace not reported yet.
    in_flight: int


class ReportsView(Section):
    """`reports`: the judged arm's report rate against current's (`stats.reports.ReportCheck`)."""

    #: The arm judged against current (shadow or candidate).
    arm: str | None = None
    verdict: str = Field(json_schema_extra={
        "enum": [OK, INSUFFICIENT, LAGGING, SHORT, BOTH_SHORT]})
    assigned: ArmCountsView
    reported: ArmCountsView
    rate: ArmRatesView
    log_e: Number
    threshold: Number
    alpha: Number
    #: Report buckets before this one are mature (read).
    mature_before: int
    grace_s: Number
    reason: str
    by_reporter: dict[str, ReporterView] = {}
    missing_runs: MissingRunsView | None = None
    #: Reports matched to their own assignments by run id, over the reporters whose missing
    #: runs count (runs without ids: bucket arithmetic, docs/gatekeeper.md).
    runs: dict[str, RunFiguresView] | None = Field(None, exclude_if=lambda value: value is None)


def reports_view(section: dict[str, Any] | ReportsView | None) -> ReportsView | None:
    """The section's JSON (its builder's, or a simulator's) as the model."""
    if section is None or isinstance(section, ReportsView):
        return section
    return ReportsView.model_validate(section)
