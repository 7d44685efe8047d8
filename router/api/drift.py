"""GET /v1/roles/<role>/drift/calibrate: replay stored known-good runs through a detector.

Every alarm on known-good history is a false alarm, so the answer, one row per
h, is what h should be chosen from (calibrate h by replaying known-good history
and counting alarms, not by intuition).
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from gatekeeper.stats.drift import METRICS, calibrate
from gatekeeper.view.sections import latest
from router.api.params import role_param
from router.api.traces import trace_store
from router.server.auth import require
from router.server.errors import BadRequest
from router.server.offload import off_loop
from router.server.services import services_of

bp = Blueprint("drift", __name__)

MAX_RUNS = 100_000
#: Each h replays every run once: more than this many thresholds is refused.
MAX_HS = 50
ARMS = ("current", "candidate", "shadow")


def _float(raw: str, name: str, low: float, high: float) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise BadRequest(f"{name}: expected a number, got {raw!r}", field=name) from None
    if not low < value <= high:
        raise BadRequest(f"{name}: must be within ({low:g}, {high:g}], got {raw}", field=name)
    return value


@bp.get("/v1/roles/<role>/drift/calibrate")
@require("caller", "reviewer", "gatekeeper")
def calibrate_view(role: str) -> ResponseReturnValue:
    """False alarms per h over the newest `runs` stored runs of (config, arm)."""
    role = role_param(role)
    record = services_of(current_app).store.get(role)
    args = request.args
    config = args.get("config") or record.binding.current
    arm = args.get("arm", "current")
    if arm not in ARMS:
        raise BadRequest(f"arm: one of {', '.join(ARMS)}", field="arm")
    metric = args.get("metric", "run_failure")
    if metric not in METRICS:
        raise BadRequest(f"metric: one of {', '.join(METRICS)}", field="metric")
    raw_hs = args.getlist("h")
    if not raw_hs:
        raise BadRequest("h: give at least one threshold, e.g. ?h=3&h=5", field="h")
    if len(raw_hs) > MAX_HS:
        raise BadRequest(f"h: at most {MAX_HS} thresholds per request, got {len(raw_hs)}",
                         field="h")
    hs = [_float(h, "h", 0.0, 1e6) for h in raw_hs]
    drift = record.binding.gate.drift
    shift = _float(args["shift"], "shift", 0.0, 1.0) if "shift" in args else drift.shift
    p0 = _float(args["p0"], "p0", 0.0, 1.0) if "p0" in args else drift.baseline.get(metric)
    try:
        runs = int(args.get("runs", "20000"))
    except ValueError:
        raise BadRequest("runs: expected a whole number", field="runs") from None
    if not 1 <= runs <= MAX_RUNS:
        raise BadRequest(f"runs: must be within 1..{MAX_RUNS}", field="runs")
    replayed = latest(trace_store(), role, config, arm, runs)
    # Up to 50 thresholds over 100,000 runs is seconds of pure replay: off the loop.
    rows = off_loop(calibrate, replayed, metric=metric, hs=hs, shift=shift, p0=p0)
    return jsonify({"role": role, "config": config, "arm": arm, "metric": metric,
                    "shift": shift, "runs": len(replayed), "results": rows})
