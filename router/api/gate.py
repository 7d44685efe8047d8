"""GET /v1/roles/<role>/gate and /tools: the regression gate over the current stage's window.

The window of each arm is "the traces since the current stage began" (the
binding's stage_since), read from the running aggregates the ingest keeps, so
the answer costs one Redis round trip whatever the window holds.

`gate_view` builds the whole answer from a `GateContext`; add a section by
writing `view["name"] = section(ctx)` in it (the gatekeeper adds "paired" and
"drift" this way).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue

from bindings.configs import ConfigStore
from bindings.models import VersionedBinding
from bindings.store import BindingStore
from gatekeeper.gate import compare, evaluate
from gatekeeper.store.trace_keys import epoch_of
from gatekeeper.store.traces import TraceStore
from gatekeeper.view.criteria import criteria_section
from gatekeeper.view.sections import drift_section, paired_section
from gatekeeper.window import WindowStats
from router.api.params import role_param
from router.api.traces import trace_store
from router.server.auth import require

bp = Blueprint("gate", __name__)


@dataclass(frozen=True)
class GateContext:
    """Everything a gate section reads: the binding, the window epoch, each arm's window."""

    role: str
    record: VersionedBinding
    epoch: str
    #: arm -> (config, window) for "current", and "candidate"/"shadow" when there is one.
    arms: dict[str, tuple[str, WindowStats]]
    traces: TraceStore
    now: float


def arm_configs(record: VersionedBinding) -> dict[str, str]:
    """Which config each arm of the role runs: current always, candidate and shadow if set."""
    binding = record.binding
    arms = {"current": binding.current}
    if binding.candidate is not None:
        arms["candidate"] = binding.candidate
        arms["shadow"] = binding.candidate
    return arms


def gate_context(store: BindingStore, traces: TraceStore, role: str, now: float) -> GateContext:
    """Read the binding (fresh, not a worker's copy) and each arm's current-stage window."""
    record = store.get(role)
    epoch = epoch_of(record.binding)
    configs = arm_configs(record)
    windows = traces.windows(role, [(config, arm) for arm, config in configs.items()], epoch)
    arms = {arm: (config, window) for (arm, config), window in zip(configs.items(), windows)}
    return GateContext(role, record, epoch, arms, traces, now)


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


@bp.get("/v1/roles/<role>/gate")
@require("caller", "gatekeeper")
def gate(role: str) -> ResponseReturnValue:
    """The gate over the role's current, candidate and shadow arms since the stage began."""
    store = current_app.extensions["rolegate"].store
    return jsonify(gate_view(store, trace_store(), role_param(role), time.time()))


@bp.get("/v1/roles/<role>/tools")
@require("caller", "gatekeeper")
def tools(role: str) -> ResponseReturnValue:
    """The tool tally per config: every tool each config's runs called, and how often."""
    role = role_param(role)
    current_app.extensions["rolegate"].store.get(role)  # 404 for an unknown role
    return jsonify({"role": role, "configs": trace_store().tally(role)})
