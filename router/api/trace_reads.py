"""Reading stored traces back.

    GET /v1/traces/<run_id>          one stored trace with its verdict (?role= when two
                                     roles know the run id, ?reporter= when two tokens
                                     sent traces under it: `claimed_by` names them)
    GET /v1/roles/<role>/traces      the role's newest traces across its live configs and
                                     arms, oldest first (?since_id=&limit=&config=&arm=)

A tripwire history entry names a run id; the first route is how anyone fetches
that run. The second is what `rolegate traces tail ROLE` polls: `since_id` (a
stream id from an earlier answer, inclusive) pages forward without gaps; the
caller drops what it has already seen by `id` and `run_id`.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from bindings.errors import NotFound
from gatekeeper.store.judge_pairs import PairStore
from gatekeeper.store.traces import StoredTrace
from router.api.feedback import role_of_run
from router.api.judge_sampling import judge_store
from router.api.params import int_arg, role_param
from router.api.traces import trace_store
from router.server.auth import principal, require
from router.server.errors import BadRequest
from router.server.services import services_of

bp = Blueprint("trace_reads", __name__)

ARMS = ("current", "candidate", "shadow")
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_CONFIG = 200
STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


def _entry(role: str, stored: StoredTrace) -> dict[str, Any]:
    """A stored trace as JSON: the trace as reported (fields left out stay out)."""
    return {"id": stored.id, "received": stored.time, "role": role,
            "trace": stored.trace.model_dump(mode="json", exclude_none=True),
            "verdict": stored.verdict.to_json()}


@bp.get("/v1/traces/<run_id>")
@require("caller", "gatekeeper")
def get_trace(run_id: str) -> ResponseReturnValue:
    """One stored trace: the trace as reported (plus `time`), its verdict, when it arrived."""
    # Checked like every per-role read: a role-limited token reads its roles' runs only.
    role = role_of_run(run_id, request.args.get("role"))
    store = trace_store()
    claims = store.claims(role, run_id)
    named = request.args.get("reporter")
    if named is not None and named not in claims:
        raise NotFound(f"no trace with run_id {run_id!r} from reporter {named!r} for role "
                       f"{role!r}", role=role, run_id=run_id, reporter=named)
    # Several tokens sent traces under this run id (a clash): the named one's, else the
    # caller's own, else the first stored; `claimed_by` says there are others.
    stored = store.lookup(role, run_id, named or principal().name)
    body = _entry(role, stored)
    # The online judge's verdicts on this run, when it was sampled and judged.
    judged = judge_store().verdicts(role, run_id, stored.trace.reporter)
    if judged is not None:
        body["judge"] = judged
    # The blind pairwise verdict on its shadow pair, stored with both of the pair's runs.
    pairwise = PairStore(judge_store().connection).verdict(role, run_id)
    if pairwise is not None:
        body.setdefault("judge", {})["pairwise"] = pairwise["pairwise"]
    if len(claims) > 1:
        body["claimed_by"] = sorted(claims)
    return jsonify(body)


def _streams(role: str) -> list[tuple[str, str]]:
    """(config, arm) pairs to read: the asked-for ones, else the binding's live configs."""
    config = request.args.get("config")
    arm = request.args.get("arm")
    if arm is not None and arm not in ARMS:
        raise BadRequest(f"arm: one of {', '.join(ARMS)}, got {arm!r}", field="arm")
    if config is not None:
        if not 1 <= len(config) <= MAX_CONFIG:
            raise BadRequest(f"config: 1 to {MAX_CONFIG} characters", field="config")
        configs = [config]
    else:
        binding = services_of(current_app).store.get(role).binding
        configs = [binding.current] + ([binding.candidate] if binding.candidate else [])
    arms = [arm] if arm is not None else list(ARMS)
    return [(c, a) for c in dict.fromkeys(configs) for a in arms]


def _since_id() -> str | None:
    raw = request.args.get("since_id")
    if raw is None:
        return None
    # fullmatch: '$' alone would take a trailing line break; an empty one is not an id.
    if not STREAM_ID.fullmatch(raw):
        raise BadRequest(f"since_id: a stream id like 1733030000000-0, got {raw!r}",
                         field="since_id")
    return raw


def _order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq)


@bp.get("/v1/roles/<role>/traces")
@require("caller", "gatekeeper")
def role_traces(role: str) -> ResponseReturnValue:
    """The role's traces in arrival order: the newest `limit`, or the first `limit` from since_id."""
    role = role_param(role)
    limit = int_arg("limit", DEFAULT_LIMIT) or 0
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit: 1 to {MAX_LIMIT}, got {limit}", field="limit")
    since_id = _since_id()
    store = trace_store()
    found: list[StoredTrace] = []
    for config, arm in _streams(role):
        if since_id is None:
            found += store.newest(role, config, arm, limit)
        else:
            found += store.read(role, config, arm, count=limit, from_id=since_id)
    # Stream ids order arrivals within one stream; two streams can hold the same
    # millisecond, and then the trace's time (set on ingest) says which came first.
    found.sort(key=lambda s: (*_order(s.id), s.trace.time or 0.0))
    found = found[-limit:] if since_id is None else found[:limit]
    return jsonify({"role": role, "traces": [_entry(role, s) for s in found],
                    "last_id": found[-1].id if found else since_id})
