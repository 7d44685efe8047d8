"""Feedback on production runs, and the golden sample drawn from them.

    POST /v1/traces/<run_id>/feedback   {"tier", "reviewer"?, "correction"?, "note"?, "role"?}
    GET  /v1/traces/<run_id>/feedback   every entry on the run and the tier they add up to
    GET  /v1/roles/<role>/golden        a golden sample under the role's current policy
                                        (?min_age=s&window=s&seed=&quota=tier:N ...)

`role` may be left out of a feedback body: the run id is looked up among the
roles that have bindings. Tiers: negative_corrected, negative, positive,
reprocessed, reviewed; a `negative` carrying a correction is stored as
`negative_corrected`.
"""

from __future__ import annotations

import re
import time
from typing import Any

from flask import Blueprint, Flask, current_app, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from gatekeeper.checks import golden
from gatekeeper.store.feedback import FeedbackStore
from gatekeeper.store.judging import human_agreement
from rolegate.trace import ROLE_PATTERN
from router.api.bodies import json_body, parse
from router.api.configs import config_store
from router.api.judge_sampling import judge_store
from router.api.params import role_param, seconds_arg
from router.api.traces import trace_store
from router.server.auth import actor, may_act_on, require, require_role
from router.server.errors import BadRequest
from router.server.services import services_of

bp = Blueprint("feedback", __name__)

EXTENSION = "rolegate.feedback"
ARMS = ("current", "candidate", "shadow")


class FeedbackRequest(BaseModel):
    """Body of POST /v1/traces/<run_id>/feedback."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tier: golden.FeedbackTier
    reviewer: str | None = Field(None, min_length=1, max_length=200)
    correction: Any = None
    note: str = Field("", max_length=4000)
    role: str | None = Field(None, pattern=ROLE_PATTERN)


def init_app(app: Flask) -> None:
    """Give the app a feedback store on its Redis connection."""
    app.extensions[EXTENSION] = FeedbackStore(services_of(app).redis)


def feedback_store() -> FeedbackStore:
    """The app's feedback store."""
    store: FeedbackStore = current_app.extensions[EXTENSION]
    return store


def role_of_run(run_id: str, role: str | None) -> str:
    """The role holding `run_id`: the named one (checked), else found among the token's roles.

    A role the token may not act on is 403 when named, and never searched when
    not: another role's run is then "not found", which says nothing of it.
    """
    if role is not None:
        role_param(role)
        require_role(role)
        trace_store().location(role, run_id)  # NotFound when the run is unknown
        return role
    # Only among the roles this token may act on: another role's run is "not found".
    roles = [r for r in services_of(current_app).store.roles() if may_act_on(r)]
    return feedback_store().find_role(run_id, roles)


def _summary(role: str, run_id: str, entries: list[golden.Feedback]) -> dict[str, Any]:
    tier, problem = golden.classify(entries)
    return {"role": role, "run_id": run_id, "tier": tier, "flagged": problem,
            "feedback": [f.model_dump(mode="json") for f in entries]}


@bp.post("/v1/traces/<run_id>/feedback")
@require("reviewer")
def add_feedback(run_id: str) -> ResponseReturnValue:
    """Record a reviewer's tier (and correction) on a stored run."""
    body = parse(FeedbackRequest, json_body(allow_empty=False))
    role = role_of_run(run_id, body.role)
    entry = golden.Feedback.model_validate({
        "run_id": run_id, "tier": body.tier, "reviewer": body.reviewer or actor(),
        "time": time.time(), "correction": body.correction, "note": body.note,
    })
    summary = _summary(role, run_id, feedback_store().add(role, entry))
    judged = judge_store().verdicts(role, run_id, "*")
    if judged is not None:
        # The online judge already spoke on this run: the feedback measures it.
        judge_store().agree(role, "human", human_agreement(entry.tier, judged["criteria"]))
    return jsonify(summary), 201


@bp.get("/v1/traces/<run_id>/feedback")
@require("caller", "reviewer", "gatekeeper")
def get_feedback(run_id: str) -> ResponseReturnValue:
    """Every feedback entry on a run, and the tier (or conflict) they add up to."""
    role = role_of_run(run_id, request.args.get("role"))
    return jsonify(_summary(role, run_id, feedback_store().get(role, run_id)))


#: One `quota` query value: a sample tier and how many cases of it.
QUOTA_PATTERN = "^(?:" + "|".join(golden.SAMPLE_TIERS) + "):[0-9]{1,9}$"


def _quotas() -> dict[str, int]:
    quotas: dict[str, int] = {}
    for raw in request.args.getlist("quota"):
        tier, _, count = raw.partition(":")
        # fullmatch, not str.isdigit(): that takes "²", which int() then refuses.
        if not re.fullmatch(QUOTA_PATTERN, raw):
            raise BadRequest(f"quota: expected tier:N with tier one of "
                             f"{', '.join(golden.SAMPLE_TIERS)}, got {raw!r}", field="quota")
        quotas[tier] = int(count)
    return quotas


#: The newest traces per arm a golden sample draws from (keeps the request well under 1 s).
GOLDEN_SCAN_LIMIT = 2_000


@bp.get("/v1/roles/<role>/golden")
@require("caller", "reviewer", "gatekeeper")
def golden_sample(role: str) -> ResponseReturnValue:
    """Sample recent, policy-current cases of the role's current config across feedback tiers."""
    role = role_param(role)
    quotas = _quotas()
    min_age = seconds_arg("min_age", golden.DEFAULT_MIN_AGE_S)
    window = seconds_arg("window", golden.DEFAULT_WINDOW_S)
    seed = request.args.get("seed", "golden")
    now = time.time()
    record = services_of(current_app).store.get(role)
    config = record.binding.current
    registered = config_store().find(config)
    policy_since = registered.policy_since if registered is not None else None
    since = max(policy_since or 0.0, now - window)
    # Bounded: the newest GOLDEN_SCAN_LIMIT traces per arm, not the whole window
    # (all 100,000 of a full window held a worker for 10.9 s).
    traces, truncated = [], False
    for arm in ARMS:
        newest = trace_store().newest(role, config, arm, GOLDEN_SCAN_LIMIT)
        truncated |= len(newest) == GOLDEN_SCAN_LIMIT and newest[0].time >= since
        traces += [stored.trace for stored in newest if stored.time >= since]
    notes, unreadable = golden.with_inline(
        traces, feedback_store().many(role, (t.run_id for t in traces)))
    sample = golden.select(traces, notes, config=config, now=now, policy_since=policy_since,
                           quotas=quotas, min_age_s=min_age, window_s=window, seed=seed,
                           unreadable=unreadable)
    body = sample.as_dict()
    for case, out in zip(sample.cases, body["cases"]):
        out["trace"] = case.trace.model_dump(mode="json")
    body.update({
        "role": role, "config": config, "policy_since": policy_since, "now": now,
        "scanned": {"traces": len(traces), "limit_per_arm": GOLDEN_SCAN_LIMIT,
                    "truncated": truncated},
        "invariants": record.binding.gate.invariants.model_dump(mode="json"),
        "criteria": [c.model_dump(mode="json") for c in registered.criteria]
        if registered is not None else [],
    })
    return jsonify(body)
