"""Online judges' side of the router: sampling at ingest, and the judging process's two routes.

    POST /v1/roles/<role>/judge/claim     {"max": N, "lease_s"?} -> up to N sampled runs to
                                          judge, each with its `claim` id, its input and output
                                          text (bounded) and the config's judge criteria
    POST /v1/roles/<role>/judge/verdicts  {"results": [{"claim", "run_id", "reporter", "arm",
                                          "config", "epoch", "verdicts": {key: {"pass",
                                          "reason"}}, "tokens"} | {..., "error": "..."}]}

Judging is at-least-once (`gatekeeper.store.judging`): a claimed run is held until
its lease ends (`lease_s`, by default long enough for the policy's timeouts), and
goes back to the queue with its call refunded if no verdict came by then; a
verdict is recorded only for a claim still held, for its own run, arm and config
(`router.api.judge_claims`: else 409, or 404 for a run not stored, nothing
written). A claimed run that cannot be judged (gone, or its config has no judge
criteria) is released at once, its call refunded.

Runs are queued at ingest (`router.api.judge_sampling`). The judge sees the run's input and
output, and its trajectory (each step's tool, arguments, result and error, as the trace stored
them: masked by the caller's `Client(mask=...)`) only when a criterion asks for it
(`trajectory: true`); never the config body, the run's stamps or a credential.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from bindings.errors import NotFound
from bindings.judge_policy import JudgePolicy
from bindings.models import VersionedBinding
from gatekeeper.store.judge_pairs import PairStore
from gatekeeper.store.judging import human_agreement
from gatekeeper.suite.judge import render_trace
from rolegate.trace import JsonInt, JsonNumber, Trace
from router.api.bodies import json_body, parse
from router.api.configs import config_store
from router.api.feedback import feedback_store
from router.api.judge_claims import check_claims
from router.api.judge_sampling import init_app, judge_store
from router.api.params import role_param
from router.api.traces import trace_store
from router.server import metrics
from router.server.auth import require
from router.server.services import services_of

bp = Blueprint("judges", __name__)
__all__ = ["bp", "init_app"]

MAX_CLAIM = 64
MAX_REASON = 2000
MAX_LEASE_S = 3600.0


class ClaimRequest(BaseModel):
    """Body of POST /v1/roles/<role>/judge/claim."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max: JsonInt = Field(8, ge=1, le=MAX_CLAIM)
    #: Seconds the claimant holds the runs before they go back to the queue.
    lease_s: JsonNumber | None = Field(None, gt=0.0, le=MAX_LEASE_S)


class Verdict(BaseModel):
    """One criterion's verdict, as the judge gave it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    passed: bool = Field(alias="pass")
    reason: str = Field("", max_length=MAX_REASON)


class PairRun(BaseModel):
    """One side of a judged shadow pair, as it was claimed."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str = Field(min_length=1, max_length=200)
    reporter: str | None = Field(None, max_length=200)


class PairVerdict(BaseModel):
    """The pairwise judge's answer in current/candidate terms, and which side was shown first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    winner: Literal["BASELINE", "CANDIDATE", "TIE"]
    score_delta: float = Field(ge=-5.0, le=5.0)
    regression_detected: bool
    reasoning: str = Field("", max_length=MAX_REASON)
    flagged_issues: list[str] = Field(default_factory=list, max_length=50)
    #: True when the candidate (shadow) was shown as A.
    swapped: bool
    safety: bool = False


class Result(BaseModel):
    """One judged (or failed) run, reported back by the judging process."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str = Field(min_length=1, max_length=200)
    reporter: str | None = Field(None, max_length=200)
    arm: Literal["current", "candidate", "shadow"]
    config: str = Field(min_length=1, max_length=200)
    epoch: str = Field(min_length=1, max_length=40)
    verdicts: dict[str, Verdict] | None = Field(None, max_length=200)
    error: str | None = Field(None, min_length=1, max_length=MAX_REASON)
    #: A second ask's verdict per key, when the run was asked twice (self-agreement).
    repeat: dict[str, bool] | None = Field(None, max_length=200)
    tokens: JsonInt = Field(0, ge=0, le=10_000_000)
    #: A shadow pair's two runs, when the result is a blind pairwise verdict.
    pair: dict[Literal["current", "shadow"], PairRun] | None = None
    pairwise: PairVerdict | None = None
    #: The claim id the run was handed out under (`/judge/claim`'s items).
    claim: str = Field(min_length=1, max_length=100)

    @property
    def pair_runs(self) -> dict[str, tuple[str, str | None]] | None:
        """arm -> (run id, reporter) of a pairwise result; None for a criteria result."""
        if self.pair is None:
            return None
        return {arm: (run.run_id, run.reporter) for arm, run in self.pair.items()}


class VerdictsRequest(BaseModel):
    """Body of POST /v1/roles/<role>/judge/verdicts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    results: list[Result] = Field(max_length=MAX_CLAIM)


def _policy(record: VersionedBinding) -> JudgePolicy:
    policy = record.binding.gate.judge
    if policy is None:
        raise NotFound(f"role {record.role!r} names no judge (gate.judge)", role=record.role)
    return policy


def judge_criteria(config: str) -> list[dict[str, Any]]:
    """The config's judge criteria (kind judge), key and wording, as the judge is asked them;
    `"trajectory": true` on those that need the run's steps."""
    found = config_store().find(config)
    if found is None:
        return []
    return [{"key": c.key, "description": c.description, **({"trajectory": True}
                                                            if c.trajectory else {})}
            for c in found.criteria if not c.deterministic]


def trajectory_text(trace: Trace, limit: int) -> str:
    """The run's steps as the judge reads them (tool, args, result, error), bounded."""
    steps = render_trace(trace)["steps"]
    return _bounded(json.dumps(steps, indent=1, ensure_ascii=False), limit)


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more]"


def _work(role: str, item: dict[str, Any], policy: JudgePolicy) -> dict[str, Any] | None:
    """What the judge sees of one claimed run; None when the run is gone or has no criteria."""
    if "pair" in item:
        return _pair_work(role, item, policy)
    try:
        stored = trace_store().lookup(role, item["run_id"], item.get("reporter"))
    except NotFound:
        return None
    criteria = judge_criteria(item["config"])
    if not criteria:
        return None
    trace = stored.trace
    given = json.dumps(trace.input, sort_keys=True) if trace.input is not None else ""
    work = {**item, "input_text": _bounded(given, policy.max_chars),
            "output_text": _bounded(trace.output_text, policy.max_chars),
            "criteria": criteria}
    if any(c.get("trajectory") for c in criteria):
        work["trajectory_text"] = trajectory_text(trace, policy.max_chars)
    return work


def _pair_work(role: str, item: dict[str, Any], policy: JudgePolicy) -> dict[str, Any] | None:
    """What the pairwise judge sees of a shadow pair: the task and both runs, unnamed."""
    sides: dict[str, Any] = {}
    task = ""
    for arm, run in item["pair"].items():
        try:
            trace = trace_store().lookup(role, run["run_id"], run.get("reporter")).trace
        except NotFound:
            return None
        shown = render_trace(trace)
        shown["final_output"] = _bounded(trace.output_text, policy.max_chars)
        sides[arm] = shown
        if arm == "shadow":
            task = json.dumps(trace.input, sort_keys=True) if trace.input is not None else ""
    keys = [c["key"] for c in judge_criteria(item["config"])]
    return {**item, "input_text": _bounded(task, policy.max_chars), "traces": sides,
            "criteria": keys, "safety": bool(set(keys) & set(policy.safety_criteria))}


def default_lease(policy: JudgePolicy, runs: int) -> float:
    """How long a claim of `runs` runs is held by default: every ask of each round of
    `concurrency` runs may take two attempts of `timeout_s`, twice with a repeat, plus a
    margin for reporting back."""
    rounds = -(-runs // policy.concurrency)
    return min(MAX_LEASE_S, 4 * policy.timeout_s * rounds + 60.0)


@bp.post("/v1/roles/<role>/judge/claim")
@require("gatekeeper")
def claim(role: str) -> ResponseReturnValue:
    """Hand out up to `max` sampled runs, within the day's budget, with what to judge."""
    role = role_param(role)
    body = parse(ClaimRequest, json_body(allow_empty=True) or {})
    record = services_of(current_app).store.get(role)
    policy = _policy(record)
    now = time.time()
    lease = body.lease_s if body.lease_s is not None else default_lease(policy, body.max)
    taken = judge_store().claim(role, body.max, max_calls=policy.max_calls_per_day,
                                max_tokens=policy.max_tokens_per_day, now=now, lease_s=lease)
    work = []
    for item in taken:
        shown = _work(role, item, policy)
        if shown is None:
            # Nothing to ask the judge: no call is made, so none is charged.
            judge_store().release(role, [item["claim"]], refund=True)
        else:
            work.append(shown)
    public = policy.model_dump(mode="json", exclude={"api_key_file"})
    return jsonify({"role": role, "judge": public, "items": work,
                    "day": judge_store().day(role, now)})


@bp.post("/v1/roles/<role>/judge/verdicts")
@require("gatekeeper")
def verdicts(role: str) -> ResponseReturnValue:
    """Store each judged run's verdicts with the trace and count them; count the errors."""
    role = role_param(role)
    body = parse(VerdictsRequest, json_body(allow_empty=False))
    _policy(services_of(current_app).store.get(role))
    check_claims(role, body.results)
    store, now = judge_store(), time.time()
    pairs = PairStore(store.connection)
    judged = errors = 0
    for result in body.results:
        item = result.model_dump(include={"run_id", "reporter", "arm", "config", "epoch"})
        if result.pair is not None and result.pairwise is not None:
            pairs.record(role, result.epoch, {a: r.model_dump() for a, r in result.pair.items()},
                         result.pairwise.model_dump(), now)
            store.add_spend(role, result.tokens, now)
            judged += 1
            continue
        if result.error is not None or not result.verdicts:
            store.record_error(role, result.error or "no verdicts", result.tokens, now)
            errors += 1
            continue
        given = {k: {"pass": v.passed, "reason": v.reason} for k, v in result.verdicts.items()}
        store.record(role, item, given, result.tokens, now)
        judged += 1
        if result.repeat:
            store.agree(role, "self", {k: result.repeat[k] == v["pass"]
                                       for k, v in given.items() if k in result.repeat})
        reviewed = feedback_store().get(role, result.run_id)
        if reviewed:
            store.agree(role, "human", human_agreement(reviewed[-1].tier, given))
    # Acknowledged only once recorded: a crash before this leaves the claims to expire and
    # the runs to be judged again (at least once, never lost).
    store.release(role, [r.claim for r in body.results], refund=False)
    if judged:
        metrics.count_judge(role, "judged", judged)
    if errors:
        metrics.count_judge(role, "error", errors)
    return jsonify({"judged": judged, "errors": errors})
