"""Exposures: every assignment counted, so runs that never report can be seen.

    POST /v1/exposures   {"exposures": [{role, config, arm, epoch, bucket, count}]}

An SDK that resolves in process sends what it assigned (`rolegate.exposures`);
each router worker counts its own HTTP resolves (`count_resolution`, called by
`router.api.resolve`, OFREP's evaluations and their WSGI fast paths) in `itertools.count` counters and a
daemon thread adds them to Redis every second (`gatekeeper.store.exposures`).
Every count carries its reporter, stamped here and never taken from a body: the
token that posted it, or the token whose resolve the router counted. The gate
view's `reports` section sets each reporter's counts against that reporter's own
reports, so a token's counts can only ever be short on its own reports.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any, Literal

from flask import Blueprint, Flask, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, model_validator
from werkzeug.exceptions import Forbidden

from bindings.models import Binding
from gatekeeper.store.exposures import Exposure, ExposureStore
from gatekeeper.store.run_matches import RunMatchStore, RunRange
from gatekeeper.store.traces import WINDOW_TTL_S
from rolegate.config_ids import ConfigId
from rolegate.exposures import BUCKET_S, MAX_IDS_PER_POST, Exposures, epoch_of
from rolegate.routing import Resolution
from rolegate.run_ids import STEM, minter, new_stem
from rolegate.trace import ROLE_PATTERN, JsonInt
from router.api.bodies import json_body, parse
from router.api.trace_limits import charge_quota
from router.server.auth import may_act_on, principal, require
from router.server.services import services_of

bp = Blueprint("exposures", __name__)
log = logging.getLogger(__name__)

#: How often a worker adds its HTTP resolves' counts to Redis.
FLUSH_S = 1.0
MAX_ROWS = 10_000
#: Run ids one request may name (each costs Redis a little work: `run_matches`).
MAX_IDS = MAX_IDS_PER_POST
#: Run ids charged as one trace against the token's ingest quota (an id costs Redis a
#: tenth of what storing a trace does, or less).
IDS_PER_TRACE = 10


class RunIdRange(BaseModel):
    """The run ids of a row's assignments: ``stem + str(n)`` for n in [from, to)
    (`rolegate.run_ids`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    stem: str = Field(pattern=STEM.pattern + "$")
    start: JsonInt = Field(alias="from", ge=0, le=10**18)
    stop: JsonInt = Field(alias="to", ge=0, le=10**18)


class ExposureRow(BaseModel):
    """`count` assignments of (role, config, arm) in stage `epoch`, time bucket `bucket`,
    and their run ids when the sender minted them (`ids`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: str = Field(min_length=1, max_length=128, pattern=ROLE_PATTERN)
    config: ConfigId
    arm: Literal["current", "candidate", "shadow"]
    epoch: str = Field(pattern=r"^(0|\d{1,12}\.\d{6})$")
    bucket: JsonInt = Field(ge=0, le=10**10)
    count: JsonInt = Field(ge=1, le=10**7)
    ids: RunIdRange | None = None

    @model_validator(mode="after")
    def _ids_count(self) -> ExposureRow:
        if self.ids is not None:
            if self.arm == "shadow":
                raise ValueError("ids: a shadow run has no run id of its own")
            if self.ids.stop - self.ids.start != self.count:
                raise ValueError(f"ids: from..to names {self.ids.stop - self.ids.start} runs, "
                                 f"count says {self.count}")
        return self


class ExposureBatch(BaseModel):
    """Body of POST /v1/exposures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    exposures: tuple[ExposureRow, ...] = Field(max_length=MAX_ROWS)

    @model_validator(mode="after")
    def _ids_bounded(self) -> ExposureBatch:
        named = sum(row.count for row in self.exposures if row.ids is not None)
        if named > MAX_IDS:
            raise ValueError(f"ids: at most {MAX_IDS} run ids per request, got {named}")
        return self


def _store() -> ExposureStore:
    return ExposureStore(services_of(current_app).redis)


@bp.post("/v1/exposures")
@require("caller", "gatekeeper")
def post_exposures() -> ResponseReturnValue:
    """Add an SDK's assignment counts, as the token's (its reporter); a role the token may
    not report for is a 403."""
    batch = parse(ExposureBatch, json_body(allow_empty=False))
    refused = sorted({row.role for row in batch.exposures if not may_act_on(row.role)})
    if refused:
        raise Forbidden(f"this token may not report for roles {refused}")
    reporter = principal().name
    named = sum(r.count for r in batch.exposures if r.ids is not None)
    if named:
        # Each id is Redis work (added, matched, removed): the ids count against the token's
        # ingest quota, IDS_PER_TRACE of them as one trace, before anything is written.
        services = services_of(current_app)
        charge_quota(services.redis, services.quota, reporter, -(-named // IDS_PER_TRACE), 0)
    add_run_ids(current_app, [(r.role, r.config, r.arm, r.epoch, r.bucket, reporter,
                       (r.ids.stem, r.ids.start, r.ids.stop)) for r in batch.exposures
                      if r.ids is not None], time.time())
    added = _store().add(Exposure(r.role, r.config, r.arm, r.epoch, r.bucket, r.count, reporter)
                         for r in batch.exposures)
    return jsonify({"added": added})


#: (role, config, arm, epoch, bucket, reporter, (stem, from, to)).
IdRow = tuple[str, str, str, str, int, str, tuple[str, int, int]]


def add_run_ids(app: Flask, rows: list[IdRow], now: float) -> int:
    """Add the rows' run ids to their reporters' pending sets (`run_matches`), for roles
    in a live rollout whose stage the row counts in (others are counted, not matched).

    Each id is scored by `now` held inside the row's time bucket, so a run's missing
    bucket is the bucket its assignment was counted in, whatever the sender's clock.
    """
    if not rows:
        return 0
    cache = services_of(app).cache
    ranges = []
    for role, config, arm, epoch, bucket, reporter, (stem, start, stop) in rows:
        record, _ = cache.get(role)
        binding = None if record is None else record.binding
        if binding is None or binding.candidate is None or epoch_of(binding.stage_since) != epoch:
            continue
        at = min(max(now, bucket * BUCKET_S), (bucket + 1) * BUCKET_S - 0.001)
        ranges.append(RunRange(role, config, arm, epoch, reporter, stem, start, stop, bucket,
                               at, float(binding.gate.reports.grace_seconds)))
    return RunMatchStore(services_of(app).redis, WINDOW_TTL_S).add(ranges) if ranges else 0


class WorkerExposures:
    """One worker's HTTP-resolve counters and the thread that adds them to Redis."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        #: reporter (the resolving token's name) -> its counters.
        self.exposures: dict[str, Exposures] = {}
        self._pid: int | None = None
        #: Ids of resolves outside a rollout (counted nowhere); drawn anew in each worker.
        self._idle: Iterator[str] = minter(new_stem(), itertools.count())
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def count(self, role: str, resolution: Resolution, binding: Binding,
              reporter: str) -> None:
        """Count one HTTP resolve (and its shadow run) by `reporter`, the token that
        resolved, while a rollout is live, and put the run's id in `resolution`
        (`run_id`: minted by the counter, so the exposure carries it)."""
        if self._pid != os.getpid():
            self._start()
        if binding.candidate is None:
            # No rollout: nothing compares the arms' report rates, so nothing is counted;
            # the run still gets an id, as every resolve answers one.
            resolution["run_id"] = next(self._idle)
            return
        counters = self.exposures.get(reporter)
        if counters is None:
            with self._lock:
                counters = self.exposures.setdefault(reporter, Exposures())
        epoch = epoch_of(binding.stage_since)
        run_id = counters.count(role, resolution["config"], resolution["arm"], epoch)
        if run_id is not None:
            resolution["run_id"] = run_id
        if resolution.get("shadow"):
            counters.count(role, str(resolution["shadow"]), "shadow", epoch)

    def _start(self) -> None:
        # After a fork the parent's thread is gone: each worker starts its own.
        with self._lock:
            if self._pid == os.getpid():
                return
            self.exposures = {}
            self._idle = minter(new_stem(), itertools.count())
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="rolegate-exposures",
                             daemon=True).start()

    def drain(self, now: float) -> list[dict[str, Any]]:
        """Rows of what every reporter's counters gained since the last drain, each with its
        `reporter`, in `now`'s time bucket (not sent anywhere: tests read what was counted)."""
        return [{**row, "reporter": reporter}
                for reporter, counters in list(self.exposures.items())
                for row in counters.drain(now)]

    def flush(self, now: float | None = None) -> None:
        """Add what the counters gained to Redis now (given back if Redis refuses).

        They land in the time bucket of `now` (default: the clock); a test gives
        a past one to have counts the gate already reads as mature.
        """
        at = time.time() if now is None else now
        drained = [(reporter, counters, counters.drain(at))
                   for reporter, counters in list(self.exposures.items())]
        drained = [d for d in drained if d[2]]
        if not drained:
            return
        try:
            add_run_ids(self.app, [(row["role"], row["config"], row["arm"], row["epoch"],
                                    row["bucket"], reporter, (row["ids"]["stem"],
                                                              row["ids"]["from"],
                                                              row["ids"]["to"]))
                                   for reporter, _, rows in drained for row in rows
                                   if "ids" in row], at)
            ExposureStore(services_of(self.app).redis).add(
                Exposure(**{k: v for k, v in row.items() if k != "ids"}, reporter=reporter)
                for reporter, _, rows in drained for row in rows)
        except Exception as exc:  # noqa: BLE001 - keep the counts for the next flush
            log.warning("could not add %d exposure counts: %s",
                        sum(len(rows) for _, _, rows in drained), exc)
            for _, counters, rows in drained:
                counters.give_back(rows)

    def stop(self) -> None:
        """Stop adding counts to Redis, dropping what is unsent (tests; workers just exit).

        An app a test is done with must not write into the next test's database.
        """
        self._stop.set()

    def _run(self) -> None:
        pid = self._pid
        while pid == os.getpid() and not self._stop.wait(FLUSH_S):
            self.flush()


def exposure_counter(app: Flask) -> WorkerExposures:
    """The app's HTTP-resolve counters (tests stop them with the app)."""
    counter: WorkerExposures = app.extensions["rolegate_exposures"]
    return counter


def count_resolution(app: Flask, role: str, resolution: Resolution, binding: Binding,
                     reporter: str) -> None:
    """Count one HTTP resolve of `role` by the token named `reporter` (the resolve view,
    OFREP's evaluations and their fast paths call this)."""
    exposure_counter(app).count(role, resolution, binding, reporter)


def init_app(app: Flask) -> None:
    """Give the app its worker's exposure counters."""
    app.extensions["rolegate_exposures"] = WorkerExposures(app)
