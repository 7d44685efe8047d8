"""The gate view of one role: every section, computed from one `GateContext`.

`gate_view` is what `GET /v1/roles/<role>/gate` answers, what the dashboard
shows and what the gatekeeper decides on. Add a section by writing
`view["name"] = section(ctx)` in it.
"""

from __future__ import annotations

from typing import Any

from bindings.store import BindingStore
from gatekeeper import heartbeat
from gatekeeper.store.configs import ConfigStore
from gatekeeper.store.heartbeat import HeartbeatStore
from gatekeeper.store.judging import JudgeStore
from gatekeeper.store.traces import TraceStore
from gatekeeper.view import kept
from gatekeeper.view.arms import arms_section, comparison_section
from gatekeeper.view.context import gate_context, view_header
from gatekeeper.view.criteria import criteria_section
from gatekeeper.view.difference import difference_section
from gatekeeper.view.judges import judges_section, merge_judged, merge_pairwise
from gatekeeper.view.outlook import next_view_section, previous_section
from gatekeeper.view.reports import merge_missing, missing_for, report_counts, with_runs
from gatekeeper.view.rollout import rollout_section
from gatekeeper.view.sections import drift_section, paired_section
from gatekeeper.view.units import units_section


def gate_view(store: BindingStore, traces: TraceStore, role: str, now: float) -> dict[str, Any]:
    """The JSON of GET /v1/roles/<role>/gate."""
    ctx = gate_context(store, traces, role, now)
    view = view_header(ctx)
    view["arms"] = arms_section(ctx)
    view["comparison"] = comparison_section(ctx)
    view["by_criterion"] = criteria_section(ctx, ConfigStore(traces.connection))
    view["judges"] = judges_section(ctx, JudgeStore(traces.connection))
    merge_judged(view["by_criterion"], view["judges"], ctx)
    counts = report_counts(ctx)  # the exposure hashes, read once for both sections
    view["reports"] = with_runs(kept.reports(ctx, counts), counts)
    merge_missing(view["arms"], view["reports"])
    view["paired"] = merge_pairwise(paired_section(ctx), view["judges"], ctx)
    view["drift"] = drift_section(ctx)
    view["concurrent"] = kept.concurrent(ctx, missing_for(ctx, counts))
    view["rollout"] = rollout_section(store, ctx)
    view["units"] = units_section(ctx, view["rollout"])
    view["difference"] = difference_section(ctx, view["units"])
    view["previous"] = previous_section(store, traces, ctx.record, now)
    view["gatekeeper"] = HeartbeatStore(traces.connection).summary()
    # Last: it reads the sections above, as the gatekeeper's decide() does; it says
    # plainly when no gatekeeper is there to take the step it names.
    view["next"] = heartbeat.annotate_next(next_view_section(store, ctx.record, view, now),
                                           view["gatekeeper"])
    return view
