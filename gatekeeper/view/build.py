"""The gate view of one role: every section, computed from one `GateContext`.

`gate_view` is what `GET /v1/roles/<role>/gate` answers, what the dashboard
shows and what the gatekeeper decides on. Add a section by writing
`view["name"] = section(ctx)` in it.
"""

from __future__ import annotations

from typing import Any

from bindings.store import BindingStore
from gatekeeper.gate import compare, evaluate
from gatekeeper.store.configs import ConfigStore
from gatekeeper.store.traces import TraceStore
from gatekeeper.view.context import GateContext, gate_context
from gatekeeper.view.criteria import criteria_section
from gatekeeper.view.sections import drift_section, paired_section


def arms_section(ctx: GateContext) -> dict[str, Any]:
    """Per arm: its config and the gate's verdict, reasons and figures over the window."""
    policy = ctx.record.binding.gate
    return {arm: {"config": config, **evaluate(window, policy).to_json()}
            for arm, (config, window) in ctx.arms.items()}


def comparison_section(ctx: GateContext) -> dict[str, Any]:
    """Candidate and shadow pass rates against current's over the same period."""
    _, current = ctx.arms["current"]
    return {arm: compare(window, current).to_json()
            for arm, (_, window) in ctx.arms.items() if arm != "current"}


def gate_view(store: BindingStore, traces: TraceStore, role: str, now: float) -> dict[str, Any]:
    """The JSON of GET /v1/roles/<role>/gate."""
    ctx = gate_context(store, traces, role, now)
    binding = ctx.record.binding
    since = binding.stage_since
    view: dict[str, Any] = {
        "role": role,
        "version": ctx.record.version,
        "stage": binding.stage.value,
        "share": binding.share,
        "paused": binding.paused,
        "current": binding.current,
        "candidate": binding.candidate,
        "window": {"since": since, "seconds": None if since is None else max(0.0, now - since),
                   "epoch": ctx.epoch},
        "policy": binding.gate.model_dump(mode="json"),
        "time": now,
    }
    view["arms"] = arms_section(ctx)
    view["comparison"] = comparison_section(ctx)
    view["by_criterion"] = criteria_section(ctx, ConfigStore(traces.connection))
    view["paired"] = paired_section(ctx)
    view["drift"] = drift_section(ctx)
    return view
