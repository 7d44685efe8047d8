"""Filling a live router's stage with assigned and reported runs, then judging it.

Shared by the report-rate tests (`test_reports.py`) and the missing-runs policy
tests (`test_missing_runs.py`): exposures go in through POST /v1/exposures and
traces through POST /v1/traces, the real paths, then decide() reads the real
gate view.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
from flask import Flask

from bindings.models import VersionedBinding
from gatekeeper import window_fields
from gatekeeper.checks.invariants import check
from gatekeeper.machine.decide import decide, evidence_from_view
from gatekeeper.store.exposures import ExposureStore
from gatekeeper.store.trace_ingest import Checked
from gatekeeper.store.trace_keys import epoch_of as stage_epoch
from gatekeeper.store.traces import TraceStore
from rolegate.exposures import epoch_of
from rolegate.trace import Trace
from router.server.services import services_of
from tests.conftest import CALLER, GATEKEEPER, auth

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


def record(url: str, role: str) -> VersionedBinding:
    """The role's binding as the router serves it."""
    body = requests.get(f"{url}/v1/bindings/{role}", headers=auth(CALLER), timeout=5).json()
    return VersionedBinding.model_validate(body)


def reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs posted long after they started stand for runs that reported at once: their
    lag from start to report is taken as 0, or the concurrent cells and the report
    buckets would rightly wait that long to read them (issue 34's report horizon)."""
    monkeypatch.setattr(window_fields, "lag_bucket", lambda lag: 0)


#: The live router at each url's trace store (`live`): `fill_stage` stores runs through it.
STORES: dict[str, TraceStore] = {}


def live(url: str, app: Flask) -> str:
    """`url` (a werkzeug server of `app`), with `app`'s trace store kept for `fill_stage`."""
    STORES[url] = TraceStore(services_of(app).redis)
    return url


def fill_stage(url: str, role: str, width: float, cand: tuple[int, ...], cur: tuple[int, ...],
               buckets: int = 8, store: TraceStore | None = None) -> None:
    """Per bucket of `width` seconds, ending 10 minutes back, each arm's (assigned,
    reported[, failed among reported]): without a failed count no run says whether
    it answered.

    With `store` (the router's; by default the one `live` kept for `url`), the runs are
    stored through it as ingest stores them when they report 0.5 s after they end:
    posted now, they would report 10 minutes after they started, and the concurrent
    cells and the report buckets would wait that long to be read.
    """
    store = store or STORES.get(url)
    found = record(url, role)
    epoch = epoch_of(found.binding.stage_since)
    first = int((time.time() - 600) // width) - buckets
    rows, traces = [], []
    for b in range(first, first + buckets):
        for arm, config, counts in (("candidate", "cfg_b", cand), ("current", "cfg_a", cur)):
            assigned, reported = counts[0], counts[1]
            rows.append({"role": role, "config": config, "arm": arm, "epoch": epoch,
                         "bucket": b, "count": assigned})
            for i in range(reported):
                trace: dict[str, Any] = {
                    "run_id": f"{arm}-{b}-{i}", "role": role, "arm": arm, "config": config,
                    "key": f"{arm}-{b}-{i}", "tools": ["read"], "stamps": STAMPS,
                    "time": b * width + 5.0, "latency_s": 2.0}
                if len(counts) > 2:
                    trace["answered"] = i >= counts[2]
                traces.append(trace)
    r = requests.post(f"{url}/v1/exposures", json={"exposures": rows}, headers=auth(CALLER),
                      timeout=5)
    assert r.status_code == 200, r.text
    if store is not None:
        # Stamped with the token that counted the exposures, as the router stamps a trace.
        (reporter,) = ExposureStore(store.connection).by_reporter(
            role, traces[0]["config"], traces[0]["arm"], epoch)
        checked = []
        for raw in traces:
            trace = Trace.model_validate({**raw, "reporter": reporter})
            checked.append(Checked(trace, check(trace, found.binding.gate.invariants),
                                   stage_epoch(found.binding), found.version,
                                   reported_at=raw["time"] + 0.5))
        store.add(checked)
        return
    for start in range(0, len(traces), 500):
        r = requests.post(f"{url}/v1/traces", json={"traces": traces[start:start + 500]},
                          headers=auth(CALLER), timeout=10)
        assert r.status_code == 200, r.text


def decide_now(url: str, role: str) -> Any:
    """(the gate view, decide()'s decision on it now)."""
    view = requests.get(f"{url}/v1/roles/{role}/gate", headers=auth(GATEKEEPER),
                        timeout=10).json()
    return view, decide(role, record(url, role), evidence_from_view(view), time.time())
