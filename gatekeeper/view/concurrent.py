"""The gate view's `concurrent` section: the candidate against current over the same cells.

Per metric (run failure, tool error, forbidden call): the candidate's runs and
events against current's over the stage's closed (time bucket, stratum) cells
(`gatekeeper.stats.concurrent`), the e-value of that comparison, and Page's
CUSUM of it with h = ln(horizon / share) for the metric's part of the CUSUM
share (`budget.concurrent_cusum_alpha`). These are what the gatekeeper rolls
back on: a shift that current shows in the same minutes is not the
candidate's. `holdback` is the share of bucketed jobs current keeps in `full`.

Under `gate.reports.missing_runs: "fail"` the run-failure metric counts each
arm's runs that were assigned and never reported as failed runs
(`gatekeeper.stats.missing`, which says which cell they join and when), and
`missing` shows them with the comparison over the runs that arrived alone
(`unadjusted`) beside it.

Cells are filed by the run's start and a bucket is read once it is wholly
before the report horizon of both arms (`closing`: now - max(grace, each arm's
p99 lag from start to report), measured in the windows); the section says so
(`filed_by`, `horizon`, `lag_p99_s`).

`section_of` is pure (two windows, the binding, the time): a fold of every
closed cell (`Folded`). The simulator keeps the fold and advances it as
buckets close, so its section is this one, bucket by bucket.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bindings.models import Binding, Stage
from gatekeeper.stats import concurrent
from gatekeeper.stats.budget import CUSUM_HORIZON_CELLS, concurrent_cusum_alpha
from gatekeeper.stats.concurrent import (
    Cell,
    Comparison,
    CusumState,
    bucket_of,
    cells_of,
    cusum_h,
    horizon_before,
    report_horizon,
)
from gatekeeper.stats.drift import RUN_FAILURE
from gatekeeper.stats.missing import Missing, with_missing
from gatekeeper.stats.units import lag_quantile
from gatekeeper.view.context import GateContext
from gatekeeper.window import CELL_EVENTS, WindowStats

LIVE = (Stage.SHADOW, Stage.CANARY, Stage.FULL)
METRICS = tuple(CELL_EVENTS)


def closing_of(ctx: GateContext) -> Closing | None:
    """The buckets `concurrent_section` reads at `ctx.now` (what a kept section is keyed
    on); None when no rollout is live."""
    binding = ctx.record.binding
    if binding.candidate is None or binding.stage not in LIVE:
        return None
    arm = "shadow" if binding.stage is Stage.SHADOW else "candidate"
    return closing(ctx.arms[arm][1], ctx.arms["current"][1], ctx.now)


def concurrent_section(ctx: GateContext, missing: Missing | None = None) -> dict[str, Any] | None:
    """The section for `ctx`'s stage; None when no rollout is live. `missing`: runs the
    run-failure metric counts as failed (`gatekeeper.view.reports.missing_for`)."""
    binding = ctx.record.binding
    if binding.candidate is None or binding.stage not in LIVE:
        return None
    arm = "shadow" if binding.stage is Stage.SHADOW else "candidate"
    return section_of(ctx.arms[arm][1], ctx.arms["current"][1], binding, ctx.now, missing)


@dataclass(frozen=True)
class Folded:
    """The section's tests folded over the closed buckets below `before`, oldest first.

    Per metric the running comparison and CUSUM: `advance` folds in the cells of
    buckets that closed since, so a reader that keeps one (the simulator, reading
    after every run) pays per new bucket, not per bucket of the stage. The numbers
    are those of a fold over every closed cell at once: the same sums, in the same
    order. (Kept across reads only while every metric counts up to the same bucket:
    with missing runs counted, `section_of` folds afresh.)
    """

    before: int
    metrics: Mapping[str, tuple[Comparison, CusumState]]

    @classmethod
    def start(cls, binding: Binding) -> Folded:
        """Nothing folded yet, the CUSUMs' h set by `binding`'s stage alpha."""
        alpha = concurrent_cusum_alpha(binding.gate.thresholds.alpha, len(METRICS))
        h = cusum_h(alpha, CUSUM_HORIZON_CELLS)
        return cls(-sys.maxsize, {m: (Comparison(), CusumState(0.0, h, 0, None))
                                  for m in METRICS})

    def advance(self, cells: Mapping[str, Sequence[Cell]], before: int) -> Folded:
        """Fold in each metric's cells of the buckets from `self.before` up to `before`
        (whole buckets, oldest first, as `cells_of` lists them)."""
        return Folded(before, {m: (compared.fold(cells[m]), state.fold(cells[m]))
                               for m, (compared, state) in self.metrics.items()})

    def section(self, binding: Binding, missing: dict[str, Any] | None = None,
                horizon: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The view's `concurrent` section of these folds (`missing`: what section_of shows
        of the missing runs counted as failed; `horizon`: `Closing.as_dict`)."""
        metrics = {m: {**compared.as_dict(), "cusum": state.as_dict()}
                   for m, (compared, state) in self.metrics.items()}
        # Read from the module at each call: a test may shorten the buckets.
        return {"bucket_s": concurrent.BUCKET_S, "grace_s": concurrent.GRACE_S,
                "closed_before": self.before,
                # Cells are filed by the run's start and read past the report horizon.
                "filed_by": "start", **(horizon or {}),
                "holdback": binding.holdback if binding.stage is Stage.FULL else 0.0,
                "metrics": metrics,
                # Runs assigned and never reported, counted as failed runs (None: not counted).
                "missing": missing,
                "alarms": [m for m, found in metrics.items() if found["cusum"]["alarm"]]}


@dataclass(frozen=True)
class Closing:
    """Which buckets are closed at a read: before `before`, by the report `horizon`."""

    before: int
    horizon: float | None
    #: Each arm's p99 lag from a run's start to its report (None: not known yet).
    lag_p99_s: Mapping[str, float | None]

    def as_dict(self) -> dict[str, Any]:
        """The section's `horizon` and `lag_p99_s`."""
        return {"horizon": None if self.horizon is None else round(self.horizon, 3),
                "lag_p99_s": dict(self.lag_p99_s)}


def closing(candidate: WindowStats, current: WindowStats, now: float) -> Closing:
    """The closed buckets at `now`: those wholly before the report horizon of both arms'
    windows (`concurrent.report_horizon`); none while an arm's lag is not known."""
    lags = {"candidate": candidate.lag_histogram(), "current": current.lag_histogram()}
    horizon = report_horizon(now, [(candidate.n, lags["candidate"]),
                                   (current.n, lags["current"])])
    first = bucket_of(now)
    if horizon is None:
        for window in (candidate, current):
            for bucket, _ in window.cells(RUN_FAILURE):
                first = min(first, bucket)
    return Closing(horizon_before(horizon, first), horizon,
                   {arm: lag_quantile(h) for arm, h in lags.items()})


def section_of(candidate: WindowStats, current: WindowStats, binding: Binding,
               now: float, missing: Missing | None = None) -> dict[str, Any]:
    """The section from the candidate's and current's stage windows at `now`: every closed
    cell folded at once (with `missing`, its runs counted as failed in the run-failure
    metric, over the cells it lets count)."""
    closed = closing(candidate, current, now)
    before = closed.before
    cand_cells, cur_cells = candidate.all_cells(), current.all_cells()
    cells = {m: cells_of(cand_cells[m], cur_cells[m], before=before) for m in METRICS}
    shown: dict[str, Any] | None = None
    if missing is not None:
        cand, cur = with_missing(cand_cells[RUN_FAILURE], cur_cells[RUN_FAILURE], missing)
        upto = missing.counted_before(before)
        added = missing.added(upto)
        shown = {"counted_before": upto, "candidate": added[0], "current": added[1],
                 "unadjusted": Comparison.of(cells[RUN_FAILURE]).as_dict()}
        cells[RUN_FAILURE] = cells_of(cand, cur, before=upto)
    return Folded.start(binding).advance(cells, before).section(binding, shown,
                                                                 closed.as_dict())
