"""GET /v1/fleet: what the fleet gets, and what a fleet budget asks of each rollout.

The expected false rollbacks among the live rollouts and per day
(`gatekeeper.stats.fleet`), over the roles the token may act on, and with the
router's `ROLEGATE_FLEET_BUDGET` set, the stage alpha it asks of each rollout
and the live roles over it (`gatekeeper.stats.fleet_budget`: advice, never
applied). The dashboard's overview shows the same (`gatekeeper.view.fleet`).
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue

from gatekeeper.view.fleet import fleet_report
from router.api.traces import trace_store
from router.server.auth import may_act_on, require
from router.server.services import services_of

bp = Blueprint("fleet", __name__)


@bp.get("/v1/fleet")
@require("caller", "reviewer", "gatekeeper")
def fleet() -> ResponseReturnValue:
    """The fleet's outlook and, with a budget set, the advice."""
    services = services_of(current_app)
    return jsonify(fleet_report(services.store, trace_store(), services.store.clock(),
                                services.settings.fleet_budget, visible=may_act_on))
