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

import logging
import os
import threading
import time
from typing import Any, Literal

from flask import Blueprint, Flask, current_app, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field
from werkzeug.exceptions import Forbidden

from bindings.models import Binding
from gatekeeper.store.exposures import Exposure, ExposureStore
from rolegate.config_ids import ConfigId
from rolegate.exposures import Exposures, epoch_of
from rolegate.routing import Resolution
from rolegate.trace import ROLE_PATTERN, JsonInt
from router.api.bodies import json_body, parse
from router.server.auth import may_act_on, principal, require
from router.server.services import services_of

bp = Blueprint("exposures", __name__)
log = logging.getLogger(__name__)

#: How often a worker adds its HTTP resolves' counts to Redis.
FLUSH_S = 1.0
MAX_ROWS = 10_000


class ExposureRow(BaseModel):
    """`count` assignments of (role, config, arm) in stage `epoch`, time bucket `bucket`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: str = Field(min_length=1, max_length=128, pattern=ROLE_PATTERN)
    config: ConfigId
    arm: Literal["current", "candidate", "shadow"]
    epoch: str = Field(pattern=r"^(0|\d{1,12}\.\d{6})$")
    bucket: JsonInt = Field(ge=0, le=10**10)
    count: JsonInt = Field(ge=1, le=10**7)


class ExposureBatch(BaseModel):
    """Body of POST /v1/exposures."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    exposures: tuple[ExposureRow, ...] = Field(max_length=MAX_ROWS)


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
    added = _store().add(Exposure(r.role, r.config, r.arm, r.epoch, r.bucket, r.count, reporter)
                         for r in batch.exposures)
    return jsonify({"added": added})


class WorkerExposures:
    """One worker's HTTP-resolve counters and the thread that adds them to Redis."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        #: reporter (the resolving token's name) -> its counters.
        self.exposures: dict[str, Exposures] = {}
        self._pid: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def count(self, role: str, resolution: Resolution, binding: Binding,
              reporter: str) -> None:
        """Count one HTTP resolve (and its shadow run) by `reporter`, the token that
        resolved, while a rollout is live."""
        if binding.candidate is None:
            return  # no rollout: nothing compares the arms' report rates
        if self._pid != os.getpid():
            self._start()
        counters = self.exposures.get(reporter)
        if counters is None:
            with self._lock:
                counters = self.exposures.setdefault(reporter, Exposures())
        epoch = epoch_of(binding.stage_since)
        counters.count(role, resolution["config"], resolution["arm"], epoch)
        if resolution.get("shadow"):
            counters.count(role, str(resolution["shadow"]), "shadow", epoch)

    def _start(self) -> None:
        # After a fork the parent's thread is gone: each worker starts its own.
        with self._lock:
            if self._pid == os.getpid():
                return
            self.exposures = {}
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
            ExposureStore(services_of(self.app).redis).add(
                Exposure(**row, reporter=reporter) for reporter, _, rows in drained
                for row in rows)
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
