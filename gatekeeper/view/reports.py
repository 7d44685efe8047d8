"""The gate view's `reports` section: assigned against reported, per arm (`gatekeeper.stats.reports`).

Also what the `missing_runs` policy (`gate.reports`, `gatekeeper.stats.missing`)
adds: the runs each arm was assigned and never reported, handed to the
`concurrent` section (where they count as failed runs under "fail") and shown
beside each arm's pass rate (`merge_missing`). The exposure hashes are read
once per view (`report_counts`).
"""

from __future__ import annotations

from typing import Any

from bindings.models import Stage
from gatekeeper.stats.budget import REPORTS_SHARE
from gatekeeper.stats.missing import FAIL, Missing, applies, mature_before, missing_of
from gatekeeper.stats.reports import report_check
from gatekeeper.store.exposures import ExposureStore
from gatekeeper.view.context import GateContext

#: Per arm (the judged one, then current): ({bucket: assigned}, {bucket: reported}).
ReportCounts = tuple[tuple[dict[int, int], dict[int, int]], tuple[dict[int, int], dict[int, int]]]


def judged_arm(ctx: GateContext) -> str | None:
    """The arm the stage judges against current; None outside a live rollout."""
    binding = ctx.record.binding
    if binding.candidate is None or binding.stage not in (Stage.SHADOW, Stage.CANARY,
                                                          Stage.FULL):
        return None
    return "shadow" if binding.stage is Stage.SHADOW else "candidate"


def report_counts(ctx: GateContext) -> ReportCounts | None:
    """Each arm's assigned and reported runs per report bucket; None outside a live rollout."""
    judged = judged_arm(ctx)
    if judged is None:
        return None
    store = ExposureStore(ctx.traces.connection)
    counts = []
    for arm in (judged, "current"):
        config, window = ctx.arms[arm]
        counts.append((store.buckets(ctx.role, config, arm, ctx.epoch),
                       window.reported_buckets()))
    return counts[0], counts[1]


def reports_section(ctx: GateContext, counts: ReportCounts | None) -> dict[str, Any] | None:
    """The judged arm's report rate against current's, and the missing-runs policy; None
    outside a live rollout."""
    if counts is None:
        return None
    binding = ctx.record.binding
    policy = binding.gate.reports
    check = report_check(counts[0], counts[1], mature_before(ctx.now, policy.grace_seconds),
                         REPORTS_SHARE * binding.gate.thresholds.alpha, policy.grace_seconds)
    why_not = applies(binding) if policy.missing_runs == FAIL else None
    return {"arm": judged_arm(ctx), **check.as_dict(),
            "missing_runs": {"policy": policy.missing_runs,
                             "applied": policy.missing_runs == FAIL and why_not is None,
                             "why_not": why_not}}


def missing_for(ctx: GateContext, counts: ReportCounts | None) -> Missing | None:
    """The runs the comparison counts as failed: None unless the policy says "fail" and
    can be applied (`gatekeeper.stats.missing.applies`)."""
    binding = ctx.record.binding
    policy = binding.gate.reports
    if counts is None or policy.missing_runs != FAIL or applies(binding) is not None:
        return None
    return missing_of(counts[0], counts[1], mature_before(ctx.now, policy.grace_seconds))


def merge_missing(arms: dict[str, Any], reports: dict[str, Any] | None) -> None:
    """Beside the judged arm's and current's pass rate, the pass rate over every run
    assigned (a missing run counted as failed) where the policy applies.

    `arms.<arm>.counting_missing`: `missing` (assigned, never reported, over buckets past
    the grace), `n` (reported plus missing), `passes`, `pass_rate`; the arm's own `n` and
    `pass_rate` stay the reported runs' (the unadjusted figures).
    """
    if not reports or not (reports.get("missing_runs") or {}).get("applied"):
        return
    for arm, key in ((reports.get("arm"), "candidate"), ("current", "current")):
        figures = arms.get(str(arm))
        if figures is None:
            continue
        missing = max(0, int(reports["assigned"][key]) - int(reports["reported"][key]))
        n, passes = int(figures.get("n", 0)) + missing, int(figures.get("passes", 0))
        figures["counting_missing"] = {"missing": missing, "n": n, "passes": passes,
                                       "pass_rate": passes / n if n else None}
