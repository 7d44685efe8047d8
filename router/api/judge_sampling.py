"""Sampling at ingest for the online judges: which runs are queued, never waited on.

Ingest never waits for a judge: `offer_sampled` only pushes a sampled run's
identity onto its role's bounded queue (one script call, `gatekeeper.store.judging`);
a run that does not fit, or that comes past the day's budget, is counted as
skipped. Sampling is by job key (the run id without one), so in shadow both
arms' runs of a sampled job are judged. Roles without a judge cost one
attribute read per trace.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable

from flask import Flask, current_app

from bindings.errors import RolegateError
from bindings.judge_policy import JudgePolicy
from bindings.models import VersionedBinding
from gatekeeper.store.judge_pairs import PairStore
from gatekeeper.store.judging import JudgeStore
from rolegate.trace import Trace
from router.server import metrics
from router.server.services import services_of

log = logging.getLogger("rolegate.judges")

EXTENSION = "rolegate.judges"


def init_app(app: Flask) -> None:
    """Give the app a judge store on its Redis connection."""
    app.extensions[EXTENSION] = JudgeStore(services_of(app).redis)


def judge_store(app: Flask | None = None) -> JudgeStore:
    """The app's judge store."""
    store: JudgeStore = (app or current_app).extensions[EXTENSION]
    return store


def sampled(role: str, key: str, rate: float) -> bool:
    """Whether the job `key` of `role` is in the judged sample at `rate` (stable per job)."""
    if rate <= 0.0:
        return False
    if rate >= 1.0:
        return True
    return zlib.crc32(f"{role}\x1f{key}".encode()) < rate * 4294967296.0


def offer_sampled(app: Flask, stored: Iterable[tuple[Trace, str]], now: float) -> None:
    """Queue each newly stored (trace, epoch) its role's judge samples; never raises.

    Roles without a judge cost one attribute read per trace.
    """
    services = services_of(app)
    # Read once per role, not per trace: a batch's traces share a few roles.
    held: dict[str, VersionedBinding | None] = {}
    for trace, epoch in stored:
        role = trace.role
        if role in held:
            record = held[role]
        else:
            record = held[role] = services.cache.get(role)[0]
        if record is None or record.binding.gate.judge is None:
            continue
        policy = record.binding.gate.judge
        if not sampled(trace.role, trace.key or trace.run_id,
                       policy.rate(trace.arm, record.binding.stage.value)):
            continue
        item = {"run_id": trace.run_id, "reporter": trace.reporter, "arm": trace.arm,
                "config": trace.config, "epoch": epoch}
        try:
            outcome = judge_store(app).offer(
                trace.role, item, queue_max=policy.queue_max,
                max_calls=policy.max_calls_per_day, max_tokens=policy.max_tokens_per_day,
                now=now)
        except RolegateError as exc:
            # The trace is stored and counted; a run left unjudged is only a smaller sample.
            log.warning("could not queue run %s of %s for its judge: %s", trace.run_id,
                        trace.role, exc)
            continue
        metrics.count_judge(trace.role, outcome)
        if (policy.pairwise and record.binding.stage.value == "shadow" and trace.key
                and trace.arm in ("current", "shadow") and outcome == "queued"
                and sampled(trace.role, "pairwise\x1f" + trace.key, policy.pairwise)):
            _offer_pair(app, trace, item, policy, now)


def _offer_pair(app: Flask, trace: Trace, item: dict[str, str | None], policy: JudgePolicy,
                now: float) -> None:
    """Park the run for its shadow mate; the second of the two queues the pair."""
    try:
        pair = PairStore(services_of(app).redis).mate(trace.role, trace.key, item)
        if pair is not None:
            outcome = judge_store(app).offer(
                trace.role, pair, queue_max=policy.queue_max,
                max_calls=policy.max_calls_per_day, max_tokens=policy.max_tokens_per_day,
                now=now)
            metrics.count_judge(trace.role, outcome)
    except RolegateError as exc:
        log.warning("could not queue the pair of job %s of %s: %s", trace.key, trace.role, exc)
