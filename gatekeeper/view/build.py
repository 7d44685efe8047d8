"""The gate view of one role: every section, computed from one `GateContext`.

`gate_view` is what `GET /v1/roles/<role>/gate` answers, what the dashboard
shows and what the gatekeeper decides on. Add a section by writing its model in
`gatekeeper.view_model`, one more field on `GateView`, and `name=section(ctx)` here.
"""

from __future__ import annotations

from bindings.store import BindingStore
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
from gatekeeper.view_model import GatekeeperView, GateView
from gatekeeper.view_model.arms import arms_view
from gatekeeper.view_model.comparison import comparison_view, previous_view
from gatekeeper.view_model.concurrent import concurrent_view
from gatekeeper.view_model.criteria import criteria_view
from gatekeeper.view_model.judges import judges_view
from gatekeeper.view_model.next import annotate_next
from gatekeeper.view_model.paired import paired_view
from gatekeeper.view_model.reports import reports_view


def gate_view(store: BindingStore, traces: TraceStore, role: str, now: float) -> GateView:
    """GET /v1/roles/<role>/gate (its JSON: `GateView.as_json()`)."""
    ctx = gate_context(store, traces, role, now)
    # In the order the sections were always built: some advance kept state as they read.
    arms = arms_section(ctx)
    comparison = comparison_section(ctx)
    by_criterion = criteria_section(ctx, ConfigStore(traces.connection))
    judges = judges_section(ctx, JudgeStore(traces.connection))
    merge_judged(by_criterion, judges, ctx)
    counts = report_counts(ctx)  # the exposure hashes, read once for both sections
    reports = with_runs(kept.reports(ctx, counts), counts)
    merge_missing(arms, reports)
    paired = merge_pairwise(paired_section(ctx), judges, ctx)
    drift = drift_section(ctx)
    concurrent = kept.concurrent(ctx, missing_for(ctx, counts))
    rollout = rollout_section(store, ctx)
    units = units_section(ctx, rollout)
    keeper = GatekeeperView.model_validate(HeartbeatStore(traces.connection).summary())
    # The builders make JSON-ready dicts (some kept between views); each becomes its model.
    view = GateView.model_construct(
        **view_header(ctx), arms=arms_view(arms), comparison=comparison_view(comparison),
        by_criterion=criteria_view(by_criterion), judges=judges_view(judges),
        reports=reports_view(reports), paired=paired_view(paired), drift=drift,
        concurrent=concurrent_view(concurrent), rollout=rollout, units=units,
        difference=difference_section(ctx, units),
        previous=previous_view(previous_section(store, traces, ctx.record, now)),
        gatekeeper=keeper, next=None)
    # Last: it reads the sections above, as the gatekeeper's decide() does; it says
    # plainly when no gatekeeper is there to take the step it names.
    view.next = annotate_next(next_view_section(store, ctx.record, view, now), keeper)
    return view
