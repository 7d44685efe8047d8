"""Online judges: sampled production runs judged on the config's judge criteria, off the hot path.

Runs in the gatekeeper process (`Gatekeeper.once` calls `judge_tick` before each
tick), over the HTTP API only: for each role whose gate names a judge, claim up
to a few sampled runs (`POST /v1/roles/<role>/judge/claim`: the router hands out
no more than the day's budget allows), ask the judge about each, at most
`concurrency` at once, and report the verdicts or the errors back
(`POST /v1/roles/<role>/judge/verdicts`), where they are stored with the trace
and counted per criterion key, arm and stage for the gate.

Each ask is one chat completion (`gatekeeper.suite.judge.JudgeClient`, the one
judge client the offline suite uses too): the messages hold the run's input and
output text (bounded by the router), its trajectory when a criterion asks for it
(`trajectory: true`: each step's tool, arguments, result and error), and the
criteria to judge, each by key and wording; the answer's content must be
`{"criteria": {"<key>": {"pass": true|false, "reason": "..."}}}` naming every
asked key, or it is a judge error. A judge that errs `BREAKER_FAILURES` times in a
row is left alone for `BREAKER_OPEN_S` (a circuit breaker): its runs wait in the
bounded queue, and what does not fit is counted as skipped. Nothing here can
fail a stage: the gate reads only verdicts, and an error is only counted.

The credential is read here, from the environment variable (`api_key_env`) or
the file (`api_key_file`) the policy names, and is never logged or sent anywhere
but the judge's Authorization header.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bindings.judge_policy import JudgePolicy
from bindings.models import VersionedBinding
from gatekeeper.judge_pairwise import ask_pair
from gatekeeper.suite.judge import InvalidAnswer, JudgeClient
from rolegate.http import ApiClient, ApiError

log = logging.getLogger("gatekeeper.judging")

#: What a result repeats of its claimed item: the router accepts it only for that claim.
CLAIMED_FIELDS = ("claim", "run_id", "reporter", "arm", "config", "epoch")
BREAKER_FAILURES = 5
BREAKER_OPEN_S = 30.0
#: Characters per token, for the estimate when the judge does not report usage.
CHARS_PER_TOKEN = 4

CRITERIA_INSTRUCTIONS = """You judge one run of an AI agent against a list of criteria.
You are given the run's input and its output, and the criteria, each with a key and its wording.
When a TRAJECTORY is given, it lists the run's tool calls in order (tool, arguments, result, error).
For every criterion decide whether the output meets it.
Respond with valid JSON only, naming every criterion key given:
{"criteria": {"<key>": {"pass": true | false, "reason": "<one sentence>"}}}"""


class _Verdict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    passed: bool = Field(alias="pass", strict=True)
    reason: str = Field("", max_length=2000)


class CriteriaAnswer(BaseModel):
    """The judge's answer to one criteria request, validated strictly."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    criteria: dict[str, _Verdict]


def parse_criteria(content: str, keys: list[str]) -> dict[str, dict[str, Any]]:
    """The verdict of every asked key, out of the content; InvalidAnswer otherwise."""
    try:
        answer = CriteriaAnswer.model_validate_json(content.strip())
    except ValidationError as exc:
        raise InvalidAnswer(str(exc.errors(include_url=False)[0].get("msg"))) from None
    missing = sorted(set(keys) - set(answer.criteria))
    extra = sorted(set(answer.criteria) - set(keys))
    if missing or extra:
        raise InvalidAnswer(f"criteria keys: missing {missing}, not asked {extra}")
    return {k: {"pass": v.passed, "reason": v.reason} for k, v in answer.criteria.items()}


def criteria_messages(item: Mapping[str, Any]) -> list[dict[str, str]]:
    """The chat messages of one criteria request: instructions, then input, output, criteria."""
    asked = [{"key": c["key"], "criterion": c["description"]} for c in item["criteria"]]
    steps = item.get("trajectory_text")
    shown = f"TRAJECTORY:\n{steps}\n\n" if steps else ""
    user = (f"INPUT:\n{item.get('input_text', '')}\n\n{shown}"
            f"OUTPUT:\n{item.get('output_text', '')}"
            f"\n\nCRITERIA:\n{json.dumps(asked, indent=1)}\n")
    return [{"role": "system", "content": CRITERIA_INSTRUCTIONS},
            {"role": "user", "content": user}]


def credential(policy: JudgePolicy, environ: Mapping[str, str] | None = None) -> str | None:
    """The judge's API key, from the environment variable or the file the policy names."""
    env = os.environ if environ is None else environ
    if policy.api_key_env:
        value = env.get(policy.api_key_env)
        if value:
            return value
    if policy.api_key_file:
        try:
            with open(policy.api_key_file, encoding="utf-8") as handle:
                return handle.read().strip() or None
        except OSError as exc:
            log.warning("judge credential file unreadable: %s", type(exc).__name__)
    return None


@dataclass
class Breaker:
    """Consecutive judge failures; open (not asked) for a while after too many."""

    failures: int = 0
    open_until: float = 0.0

    def allows(self, now: float) -> bool:
        """Whether the judge may be asked at `now`."""
        return now >= self.open_until

    def record(self, ok: bool, now: float) -> None:
        """Count one ask's outcome; open after BREAKER_FAILURES failures in a row."""
        self.failures = 0 if ok else self.failures + 1
        if self.failures >= BREAKER_FAILURES:
            self.open_until = now + BREAKER_OPEN_S
            self.failures = 0


@dataclass
class Judges:
    """The judging state one gatekeeper process keeps: a breaker per role."""

    breakers: dict[str, Breaker] = field(default_factory=dict)
    environ: Mapping[str, str] | None = None


def _estimate(item: Mapping[str, Any]) -> int:
    size = len(item.get("input_text", "")) + len(item.get("output_text", ""))
    size += len(item.get("trajectory_text", ""))
    size += sum(len(c["description"]) + len(c["key"]) for c in item["criteria"])
    return (size + len(CRITERIA_INSTRUCTIONS)) // CHARS_PER_TOKEN


def repeated(run_id: str, rate: float) -> bool:
    """Whether the run is one of the share `rate` asked twice (stable per run id)."""
    return rate > 0.0 and zlib.crc32(run_id.encode()) < rate * 4294967296.0


def _ask(client: JudgeClient, item: Mapping[str, Any], repeat_rate: float = 0.0
         ) -> dict[str, Any]:
    """One run's result for the verdicts route: its verdicts (and a repeat's), or the error."""
    keys = [c["key"] for c in item["criteria"]]
    result = {k: item[k] for k in CLAIMED_FIELDS}
    messages = criteria_messages(item)
    try:
        verdicts = client.ask(messages, lambda c: parse_criteria(c, keys))
    except InvalidAnswer as exc:
        return {**result, "error": str(exc)[:2000] or "invalid answer",
                "tokens": _estimate(item)}
    tokens = client.last_tokens or _estimate(item)
    out = {**result, "verdicts": verdicts}
    if repeated(str(item["run_id"]), repeat_rate):
        # The same question again: how often the judge agrees with itself, per key.
        try:
            again = client.ask(messages, lambda c: parse_criteria(c, keys))
            out["repeat"] = {k: v["pass"] for k, v in again.items()}
            tokens += client.last_tokens or _estimate(item)
        except InvalidAnswer:
            pass  # the first answer stands; no agreement is counted
    return {**out, "tokens": tokens}


def judge_role(api: ApiClient, record: VersionedBinding, state: Judges, now: float) -> int:
    """Claim and judge one batch of the role's sampled runs; how many were reported."""
    policy = record.binding.gate.judge
    if policy is None:
        return 0
    breaker = state.breakers.setdefault(record.role, Breaker())
    if not breaker.allows(now):
        return 0
    path = f"/v1/roles/{quote(record.role, safe='')}/judge"
    claimed = api.post(f"{path}/claim", {"max": min(64, 2 * policy.concurrency)})
    items = claimed.get("items") or []
    if not items:
        return 0
    key = credential(policy, state.environ)

    def one(item: Mapping[str, Any]) -> dict[str, Any]:
        # A client per thread: requests' Session is not shared across threads.
        client = JudgeClient(policy.url, key, model=policy.model, timeout_s=policy.timeout_s,
                             attempts=2, connection_attempts=2)
        try:
            if "pair" in item:
                return ask_pair(client, item)
            return _ask(client, item, policy.repeat_rate)
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=policy.concurrency) as pool:
        results = list(pool.map(one, items))
    for result in results:
        breaker.record("error" not in result, time.time())
    return report_verdicts(api, f"{path}/verdicts", results)


def report_verdicts(api: ApiClient, path: str, results: list[dict[str, Any]]) -> int:
    """Post the results; how many the router recorded.

    The router records a batch whole or not at all: a claim that passed its
    deadline while its run was judged (and went back to the queue) refuses the
    batch (409 naming it). The others are posted once more without it; the refused
    ones are judged again from the queue (judging is at least once).
    """
    try:
        api.post(path, {"results": results})
        return len(results)
    except ApiError as exc:
        refused = {int(r["index"]) for r in (exc.details or {}).get("refused", [])
                   if isinstance(r, Mapping) and "index" in r}
        if exc.status not in (404, 409) or not refused:
            raise
    log.warning("%d judged runs refused (claims no longer held), %d reported again",
                len(refused), len(results) - len(refused))
    rest = [r for i, r in enumerate(results) if i not in refused]
    if rest:
        api.post(path, {"results": rest})
    return len(rest)


def judge_tick(api: ApiClient, now: float, state: Judges, *, rounds: int = 1) -> int:
    """Judge up to `rounds` batches of every judged role's queue; never raises for a judge."""
    listing = api.get("/v1/bindings?view=full")
    done = 0
    for role, raw in sorted(listing.get("roles", {}).items()):
        record = VersionedBinding.model_validate(raw)
        if record.binding.gate.judge is None:
            continue
        for _ in range(rounds):
            try:
                got = judge_role(api, record, state, now)
            except (ApiError, requests.RequestException) as exc:
                # The router refused or is away: the runs stay queued for the next tick.
                log.warning("judging %s paused this tick: %s", role, exc)
                break
            done += got
            if not got:
                break
    return done
