"""The gate view's `concurrent` section: the candidate against current over the same cells.

Built by `gatekeeper.view.concurrent` (kept between views by `view.kept`); what
decide() rolls back on (`gatekeeper.machine.matched`): per metric the comparison
of the closed (time bucket, stratum) cells, its e-value and Page's CUSUM of it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gatekeeper.stats.concurrent import RISKS, Comparison
from gatekeeper.stats.drift import RUN_FAILURE
from gatekeeper.view_model.section import Section
from gatekeeper.view_model.units import Number


class EventsView(Section):
    """One arm's runs in the compared cells, and how many had the event."""

    n: int
    events: int


class CellComparisonView(Section):
    """The comparison over the cells (`stats.concurrent.Comparison.as_dict`)."""

    #: ln of the mixture e-value, and ln of each relative risk's (`stats.concurrent.RISKS`);
    #: decide() reads the logs (a test's comparison may give them alone).
    log_e: Number = 0.0
    logs: list[Number]
    cells: int
    candidate: EventsView
    current: EventsView

    def comparison(self) -> Comparison:
        """The `Comparison` it shows (`Comparison.from_dict`: a foreign one is no evidence)."""
        if len(self.logs) != len(RISKS):
            return Comparison()
        return Comparison(tuple(float(x) for x in self.logs), self.cells, self.candidate.n,
                          self.candidate.events, self.current.n, self.current.events)


class CusumView(Section):
    """Page's CUSUM of the per-cell log ratio (`stats.concurrent.CusumState.as_dict`)."""

    s: Number
    h: Number
    risk: Number
    cells: int
    alarm: bool
    #: The bucket it first alarmed in, or null.
    alarm_bucket: int | None


class ConcurrentMetricView(CellComparisonView):
    """One metric's comparison with its CUSUM (a test's comparison may come without)."""

    cusum: CusumView | None = Field(None, exclude_if=lambda value: value is None)


class CountedMissingView(Section):
    """Runs assigned and never reported, counted as failed in the run-failure metric."""

    #: Buckets below this one had their missing runs counted.
    counted_before: int = 0
    candidate: int
    current: int
    #: The run-failure comparison over the runs that arrived alone.
    unadjusted: CellComparisonView | None = Field(None, exclude_if=lambda value: value is None)


class ConcurrentView(Section):
    """`concurrent`: per metric, the candidate against current over the stage's closed cells.

    decide() reads the metrics, the alarms and the missing runs; the rest has defaults so
    a test's or a simulator's section of those alone validates.
    """

    bucket_s: int = 0
    grace_s: int = 0
    #: Cells of buckets before this one are closed (read).
    closed_before: int = 0
    #: Runs are filed by their start ("start").
    filed_by: str = "start"
    #: The report horizon the closed buckets end before (null: not known yet).
    horizon: Number | None = None
    #: Each arm's p99 lag from a run's start to its report (null: not known yet).
    lag_p99_s: dict[str, Number | None] = {}
    #: The share of bucketed jobs current keeps in full.
    holdback: Number = 0.0
    metrics: dict[str, ConcurrentMetricView] = Field(json_schema_extra={
        "description": "run_failure, tool_error, forbidden_call"})
    #: Under `gate.reports.missing_runs: "fail"`; null: not counted.
    missing: CountedMissingView | None = None
    #: Metrics whose CUSUM alarms.
    alarms: list[str] = []

    def comparison(self, metric: str = RUN_FAILURE) -> Comparison:
        """The stage's comparison of `metric` (no evidence when the section lacks it)."""
        found = self.metrics.get(metric)
        return Comparison() if found is None else found.comparison()


def concurrent_view(section: dict[str, Any] | ConcurrentView | None) -> ConcurrentView | None:
    """The section's JSON (its builder's, or a simulator's) as the model."""
    if section is None or isinstance(section, ConcurrentView):
        return section
    return ConcurrentView.model_validate(section)
