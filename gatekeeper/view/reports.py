"""The gate view's `reports` section: assigned against reported, per arm (`gatekeeper.stats.reports`)."""

from __future__ import annotations

from typing import Any

from bindings.models import Stage
from gatekeeper.stats.budget import REPORTS_SHARE
from gatekeeper.stats.reports import mature_before, report_check
from gatekeeper.store.exposures import ExposureStore
from gatekeeper.view.context import GateContext


def reports_section(ctx: GateContext) -> dict[str, Any] | None:
    """The judged arm's report rate against current's; None outside a live rollout."""
    binding = ctx.record.binding
    if binding.candidate is None or binding.stage not in (Stage.SHADOW, Stage.CANARY,
                                                          Stage.FULL):
        return None
    judged = "shadow" if binding.stage is Stage.SHADOW else "candidate"
    store = ExposureStore(ctx.traces.connection)
    counts = []
    for arm in (judged, "current"):
        config, window = ctx.arms[arm]
        counts.append((store.buckets(ctx.role, config, arm, ctx.epoch),
                       window.reported_buckets()))
    check = report_check(counts[0], counts[1], mature_before(ctx.now),
                         REPORTS_SHARE * binding.gate.thresholds.alpha)
    return {"arm": judged, **check.as_dict()}
