"""Runs filed by their start; cells and report buckets read past every arm's report horizon.

Issue 34: "A run is born at its assignment". A candidate whose runs take a minute
longer than current's met an outage that fails runs by when they *start* in later
cells than current did (cells were by end), and the CUSUM rolled a healthy candidate
back. Pure: windows built by `window.increments`, the section by `section_of`.
"""

from __future__ import annotations

import random
from typing import cast

from bindings.models import Binding, VersionedBinding
from gatekeeper.checks.invariants import TraceVerdict
from gatekeeper.stats import concurrent
from gatekeeper.stats.concurrent import BUCKET_S, GRACE_S, bucket_of, report_horizon
from gatekeeper.stats.units import lag_bucket
from gatekeeper.store.traces import TraceStore
from gatekeeper.view.concurrent import closing, section_of
from gatekeeper.view.context import GateContext
from gatekeeper.view.reports import SILENT_GRACES, report_wait
from gatekeeper.window import LAG, WindowStats, increments
from rolegate.trace import Trace

STAMPS = {"agent_version": "a", "instruction_hash": "i", "model_id": "m",
          "tool_schema_hash": "t"}
BINDING = Binding(current="cfg-a", candidate="cfg-b", stage="canary", share=0.5,
                  stage_since=0.0)


def _trace(i: int, arm: str, start: float, length: float) -> Trace:
    return Trace.model_validate({
        "run_id": f"run-{i}", "role": "r", "config": "cfg-b" if arm == "candidate" else "cfg-a",
        "arm": arm, "key": f"job-{i}", "stamps": STAMPS, "time": start + length,
        "latency_s": length})


def _add(window: WindowStats, trace: Trace, failed: bool, reported_at: float) -> None:
    window.fields.update(increments(trace, TraceVerdict(passed=not failed), reported_at))


def test_a_run_is_filed_by_its_start_with_its_lag_from_start_to_report() -> None:
    """A 90 s run reported 5 s after its end: its cell is its start's bucket, its lag 95 s."""
    run = _trace(1, "candidate", 1000.0, 90.0)
    fields = increments(run, TraceVerdict(passed=False), 1095.0)
    assert fields[f"cn:{bucket_of(1000.0)}:"] == 1 and fields[f"cf:{bucket_of(1000.0)}:"] == 1
    assert bucket_of(1000.0) != bucket_of(1090.0)
    assert fields[f"{LAG}{lag_bucket(95.0)}"] == 1
    # No arrival given (a tool storing a known run): reported at its end.
    assert increments(run, TraceVerdict(passed=True))[f"{LAG}{lag_bucket(90.0)}"] == 1


def test_the_horizon_waits_for_every_arms_lag_and_never_for_less_than_the_grace() -> None:
    """max(grace, each arm's p99 lag); an arm with 1-4 lags closes nothing; an arm whose
    runs carry no lag (filed by an older release, by end) is read after the grace."""
    quick = {lag_bucket(1.0): 100}
    slow = {lag_bucket(150.0): 100}
    assert report_horizon(1000.0, [(100, quick), (100, quick)]) == 1000.0 - GRACE_S
    horizon = report_horizon(1000.0, [(100, quick), (100, slow)])
    assert horizon is not None and 1000.0 - 160.0 < horizon <= 1000.0 - 150.0
    assert report_horizon(1000.0, [(100, quick), (3, {lag_bucket(1.0): 3})]) is None
    assert report_horizon(1000.0, [(100, quick), (40, {})]) == 1000.0 - GRACE_S
    assert report_horizon(1000.0, [(100, quick), (0, {})]) == 1000.0 - GRACE_S


def test_a_slow_arm_is_not_read_before_its_runs_can_have_reported() -> None:
    """Current reports at once, the candidate 150 s after its runs start: a bucket is read
    only once the candidate's runs of it are in, so no cell is counted half-reported."""
    candidate, current = WindowStats(), WindowStats()
    for i in range(400):
        start = i * 0.5
        _add(current, _trace(i, "current", start, 1.0), False, start + 1.5)
        _add(candidate, _trace(i, "candidate", start, 1.0), False, start + 150.0)
    now = 400.0
    closed = closing(candidate, current, now)
    assert closed.horizon is not None and closed.horizon <= now - 150.0
    assert closed.before <= bucket_of(now - 150.0)
    assert closed.before < concurrent.closed_before(now)  # the grace alone would read more


def _outage_world(seed: int) -> tuple[WindowStats, WindowStats]:
    """5 jobs/s at 50% for 900 s; a 5-minute outage fails every run *started* in it on
    both arms; current's runs take 60-120 s, the candidate's 30-60 s more. Both arms are
    equal in every other respect (fail 0.05)."""
    rnd = random.Random(seed)
    windows = {"candidate": WindowStats(), "current": WindowStats()}
    t, i = 0.0, 0
    while t < 900.0:
        t += rnd.expovariate(5.0)
        i += 1
        arm = "candidate" if rnd.random() < 0.5 else "current"
        length = rnd.uniform(60.0, 120.0) + (rnd.uniform(30.0, 60.0) if arm == "candidate"
                                             else 0.0)
        failed = 300.0 <= t < 600.0 or rnd.random() < 0.05
        _add(windows[arm], _trace(i, arm, t, length), failed, t + length + rnd.uniform(0, 0.5))
    return windows["candidate"], windows["current"]


def test_a_slower_candidate_under_an_outage_by_start_raises_no_alarm() -> None:
    """The outage's failures fall in the same start cells on both arms: no CUSUM alarm, no
    evidence against the candidate, read at every bucket of the stage and after it."""
    candidate, current = _outage_world(7)
    for now in range(60, 1300, BUCKET_S):
        section = section_of(candidate, current, BINDING, float(now))
        assert section["alarms"] == [], (now, section["metrics"]["run_failure"])
        assert section["filed_by"] == "start"
    failing = section["metrics"]["run_failure"]
    assert failing["candidate"]["events"] > 500 and failing["current"]["events"] > 500
    assert failing["log_e"] < 2.0


def test_the_section_says_how_it_files_and_when_it_reads() -> None:
    """`filed_by`, `horizon` and each arm's p99 lag are in the section."""
    candidate, current = _outage_world(3)
    section = section_of(candidate, current, BINDING, 1000.0)
    assert section["filed_by"] == "start"
    lags = section["lag_p99_s"]
    assert lags["candidate"] is not None and lags["current"] is not None
    assert lags["candidate"] > lags["current"] >= 100.0
    assert section["horizon"] == round(1000.0 - lags["candidate"], 3)
    assert section["closed_before"] == int(section["horizon"] // BUCKET_S)


def _context(candidate: WindowStats, current: WindowStats, now: float) -> GateContext:
    record = VersionedBinding(role="r", version=1, binding=BINDING, updated_at=0.0,
                              updated_by="test")
    return GateContext("r", record, "e", {"current": ("cfg-a", current),
                                          "candidate": ("cfg-b", candidate)},
                       cast(TraceStore, None), now)


def test_report_buckets_wait_for_the_slower_arms_runs_and_reports() -> None:
    """A report bucket matures past max(grace, each arm's p99 lag from start to report): a
    candidate reporting 150 s after its runs is waited for, not found short; an arm with
    runs and under 5 lags is waited for ten graces (one that never reports is found then)."""
    grace = BINDING.gate.reports.grace_seconds
    candidate, current = WindowStats(), WindowStats()
    for i in range(100):
        _add(current, _trace(i, "current", float(i), 1.0), False, i + 1.5)
        _add(candidate, _trace(i, "candidate", float(i), 1.0), False, i + 151.0)
    wait = report_wait(_context(candidate, current, 300.0))
    assert 150.0 <= wait < 180.0 and wait > grace
    quick = WindowStats()
    for i in range(100):
        _add(quick, _trace(i, "candidate", float(i), 1.0), False, i + 1.5)
    assert report_wait(_context(quick, current, 300.0)) == grace
    few = WindowStats()
    for i in range(3):
        _add(few, _trace(i, "candidate", float(i), 1.0), False, i + 1.5)
    assert report_wait(_context(few, current, 300.0)) == SILENT_GRACES * grace
