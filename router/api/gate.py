"""GET /v1/roles/<role>/gate and /tools: the regression gate over the current stage's window.

The view itself is built outside Flask by `gatekeeper.view.gate_view`; this
module only authenticates, reads the role parameter and renders it (`GateView.as_json`).
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from gatekeeper.view import gate_view
from gatekeeper.view.by_rule import rule_view
from router.api.params import role_param
from router.api.traces import trace_store
from router.server.auth import require
from router.server.services import services_of

bp = Blueprint("gate", __name__)


@bp.get("/v1/roles/<role>/gate")
@require("caller", "reviewer", "gatekeeper")
def gate(role: str) -> ResponseReturnValue:
    """The gate over the role's current, candidate and shadow arms since the stage began.

    `?rule=R`: over the runs targeting rule R routed (`gatekeeper.view.by_rule`).
    """
    store = services_of(current_app).store
    # The view's `time` is the one clock stage ages are read on (Redis TIME, bindings.clock).
    now = store.clock()
    rule = request.args.get("rule")
    if rule is not None:
        return jsonify(rule_view(store, trace_store(), role_param(role), rule, now).as_json())
    return jsonify(gate_view(store, trace_store(), role_param(role), now).as_json())


@bp.get("/v1/roles/<role>/tools")
@require("caller", "reviewer", "gatekeeper")
def tools(role: str) -> ResponseReturnValue:
    """The tool tally per config: every tool each config's runs called, and how often."""
    role = role_param(role)
    services_of(current_app).store.get(role)  # 404 for an unknown role
    return jsonify({"role": role, "configs": trace_store().tally(role)})
