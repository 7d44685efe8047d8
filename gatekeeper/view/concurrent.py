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

`section_of` is pure (two windows, the binding, the time), so the simulator
builds the section with it too.
"""

from __future__ import annotations

from typing import Any

from bindings.models import Binding, Stage
from gatekeeper.stats import concurrent
from gatekeeper.stats.budget import CUSUM_HORIZON_CELLS, concurrent_cusum_alpha
from gatekeeper.stats.concurrent import (
    Comparison,
    cells_of,
    closed_before,
    cusum,
    cusum_h,
)
from gatekeeper.stats.drift import RUN_FAILURE
from gatekeeper.stats.missing import Missing, with_missing
from gatekeeper.view.context import GateContext
from gatekeeper.window import CELL_EVENTS, WindowStats

LIVE = (Stage.SHADOW, Stage.CANARY, Stage.FULL)
METRICS = tuple(CELL_EVENTS)


def concurrent_section(ctx: GateContext, missing: Missing | None = None) -> dict[str, Any] | None:
    """The section for `ctx`'s stage; None when no rollout is live. `missing`: runs the
    run-failure metric counts as failed (`gatekeeper.view.reports.missing_for`)."""
    binding = ctx.record.binding
    if binding.candidate is None or binding.stage not in LIVE:
        return None
    arm = "shadow" if binding.stage is Stage.SHADOW else "candidate"
    return section_of(ctx.arms[arm][1], ctx.arms["current"][1], binding, ctx.now, missing)


def section_of(candidate: WindowStats, current: WindowStats, binding: Binding,
               now: float, missing: Missing | None = None) -> dict[str, Any]:
    """The section from the candidate's and current's stage windows at `now` (with
    `missing`, its runs counted as failed in the run-failure metric)."""
    before = closed_before(now)
    alpha = concurrent_cusum_alpha(binding.gate.thresholds.alpha, len(METRICS))
    h = cusum_h(alpha, CUSUM_HORIZON_CELLS)
    metrics: dict[str, Any] = {}
    cand_cells, cur_cells = candidate.all_cells(), current.all_cells()
    shown: dict[str, Any] | None = None
    for metric in METRICS:
        cand, cur, upto = cand_cells[metric], cur_cells[metric], before
        if metric == RUN_FAILURE and missing is not None:
            cand, cur = with_missing(cand, cur, missing)
            upto = missing.counted_before(before)
            added = missing.added(upto)
            shown = {"counted_before": upto, "candidate": added[0], "current": added[1],
                     "unadjusted": Comparison.of(cells_of(cand_cells[metric], cur_cells[metric],
                                                          before=before)).as_dict()}
        cells = cells_of(cand, cur, before=upto)
        metrics[metric] = {**Comparison.of(cells).as_dict(), "cusum": cusum(cells, h).as_dict()}
    # Read from the module at each call: a test may shorten the buckets.
    return {"bucket_s": concurrent.BUCKET_S, "grace_s": concurrent.GRACE_S,
            "closed_before": before,
            "holdback": binding.holdback if binding.stage is Stage.FULL else 0.0,
            "metrics": metrics,
            # Runs assigned and never reported, counted as failed runs (None: not counted).
            "missing": shown,
            "alarms": [m for m, found in metrics.items() if found["cusum"]["alarm"]]}
