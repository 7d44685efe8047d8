"""Drift detectors kept in Redis: advanced over new runs only, same numbers as a replay, CAS-saved."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
import redis

from bindings.models import DriftPolicy, Invariants
from gatekeeper.checks.invariants import check
from gatekeeper.stats.drift import (
    FORBIDDEN_CALL,
    METRICS,
    RUN_FAILURE,
    SETTLED_REFERENCE,
    TOOL_ERROR,
    Detector,
    Params,
    bounded_p0,
    derived_h,
    params_for,
    replay,
)
from gatekeeper.stats.pairing import Run
from gatekeeper.store.drift_state import DriftStates, Watch, drift_key
from gatekeeper.store.traces import Checked, TraceStore
from gatekeeper.window import WindowStats
from rolegate.trace import Trace

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
INV = Invariants(forbidden_tools=("egress",), max_steps=3)
ROLE, EPOCH = "r", "100.000000"
PARAMS = Params(p0=0.05, shift=0.1, h=3.0, reference=0)
WATCH = Watch("cfg_b", "candidate", None, {m: PARAMS for m in METRICS})


def _trace(i: int, kind: str) -> Trace:
    """'.' passes, 'F' fails (too many steps), 'E' passes with a tool error, 'X' calls egress."""
    tools = {"F": ["read"] * 4, "X": ["egress"]}.get(kind, ["read"])
    return Trace.model_validate({"run_id": f"run-{i}", "role": ROLE, "config": "cfg_b",
                                 "arm": "candidate", "key": f"job-{i}", "stamps": STAMPS,
                                 "tools": tools, "tool_errors": int(kind == "E"),
                                 "cost_usd": 0.01})


class Feed:
    """Appends runs of a pattern to the candidate stream and keeps the same runs in memory."""

    def __init__(self, connection: redis.Redis) -> None:
        self.store = TraceStore(connection)
        self.runs: list[Run] = []

    def add(self, pattern: str) -> None:
        """Store one trace per character of `pattern`."""
        traces = [_trace(len(self.runs) + i, kind) for i, kind in enumerate(pattern)]
        checked = [Checked(t, check(t, INV), EPOCH) for t in traces]
        self.store.add(checked)
        self.runs += [Run(t.key, passed=c.verdict.passed, tool_error=t.tool_errors > 0,
                          forbidden_call=bool(c.verdict.forbidden))
                      for t, c in zip(traces, checked)]


class CountingStates(DriftStates):
    """DriftStates that records how many stream entries each read went through."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_sizes: list[int] = []

    def _read(self, role: str, watches: Sequence[Watch],
              starts: Sequence[dict[str, Detector]]) -> list[list[tuple[str, Run]]]:
        batches = super()._read(role, watches, starts)
        self.read_sizes.append(sum(len(b) for b in batches))
        return batches


@pytest.fixture
def feed(redis_conn: redis.Redis) -> Feed:
    """An empty candidate stream on the test database."""
    return Feed(redis_conn)


def _advance(states: DriftStates) -> dict[str, Detector]:
    return states.advance(ROLE, EPOCH, [WATCH])[0].detectors


def test_incremental_alarm_fires_at_the_same_run_as_replay(feed: Feed,
                                                           redis_conn: redis.Redis) -> None:
    """Reads between batches leave every detector exactly where one replay of all runs ends."""
    states = DriftStates(redis_conn)
    for chunk in ("....F...", "FF.EE", "", "F.FFX.", "XX.E.EEE", "." * 20, "FFFFF"):
        feed.add(chunk)
        _advance(states)
    stored = states.load(ROLE, EPOCH, [WATCH])[0]
    for metric in METRICS:
        expected = replay(metric, feed.runs, p0=PARAMS.p0, shift=PARAMS.shift, h=PARAMS.h)
        assert stored[metric].report() == expected
    assert stored[RUN_FAILURE].first_alarm_at is not None
    assert stored[RUN_FAILURE].report().alarms >= 1


def test_read_after_n_new_traces_processes_only_those(feed: Feed,
                                                      redis_conn: redis.Redis) -> None:
    """A read after N new traces goes through exactly N entries; a read with none, through 0."""
    states = CountingStates(redis_conn)
    feed.add("." * 300)
    _advance(states)
    feed.add("F.E.X.F")
    detectors = _advance(states)
    _advance(states)
    assert states.read_sizes == [300, 7, 0]
    assert {d.n for d in detectors.values()} == {307}


def test_far_behind_catches_up_over_successive_reads(feed: Feed,
                                                     redis_conn: redis.Redis) -> None:
    """With a bound of 10 entries per read, 35 runs take 4 reads, flagged until caught up."""
    states = CountingStates(redis_conn, max_advance=10)
    feed.add("..F.E" * 7)
    flags = [states.advance(ROLE, EPOCH, [WATCH])[0].caught_up for _ in range(4)]
    assert flags == [False, False, False, True]
    assert states.read_sizes == [10, 10, 10, 5]
    final = states.load(ROLE, EPOCH, [WATCH])[0][TOOL_ERROR]
    assert final.report() == replay(TOOL_ERROR, feed.runs, p0=0.05, shift=0.1, h=3.0)


def test_concurrent_advances_do_not_double_count(feed: Feed, redis_conn: redis.Redis) -> None:
    """A reader that lost the compare-and-set writes nothing and shows the winner's newer state."""
    feed.add("FFFF.F.FF")
    read_done, winner_saved = threading.Event(), threading.Event()

    class Slow(DriftStates):
        def _read(self, role: str, watches: Sequence[Watch],
                  starts: Sequence[dict[str, Detector]]) -> list[list[tuple[str, Run]]]:
            batches = super()._read(role, watches, starts)
            read_done.set()
            assert winner_saved.wait(5)
            return batches

    slow_result: list[dict[str, Detector]] = []
    slow = threading.Thread(target=lambda: slow_result.append(_advance(Slow(redis_conn))))
    slow.start()
    assert read_done.wait(5)
    feed.add("F")
    fast = _advance(DriftStates(redis_conn))
    winner_saved.set()
    slow.join(5)
    stored = DriftStates(redis_conn).load(ROLE, EPOCH, [WATCH])[0]
    assert fast[RUN_FAILURE].n == 10 and stored[RUN_FAILURE].n == 10
    assert slow_result[0] == stored == fast
    assert stored[RUN_FAILURE].report() == replay(RUN_FAILURE, feed.runs, p0=0.05, shift=0.1,
                                                  h=3.0)


def test_racing_readers_count_every_run_once(feed: Feed, redis_conn: redis.Redis) -> None:
    """Four threads reading while runs arrive end with each run counted exactly once."""
    errors: list[BaseException] = []

    def reader() -> None:
        states = DriftStates(redis_conn)
        try:
            for _ in range(15):
                _advance(states)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    for _ in range(10):
        feed.add("F.E.X...F.")
    for thread in threads:
        thread.join(10)
    assert errors == []
    final = _advance(DriftStates(redis_conn))
    for metric in METRICS:
        assert final[metric].report() == replay(metric, feed.runs, p0=0.05, shift=0.1, h=3.0)


def test_new_epoch_and_new_parameters_restart(feed: Feed, redis_conn: redis.Redis) -> None:
    """A new stage epoch starts fresh keys from its start; a changed h restarts in place."""
    states = DriftStates(redis_conn)
    feed.add("FFFF")
    _advance(states)
    stamp = int(feed.store.read(ROLE, "cfg_b", "candidate")[-1].id.split("-")[0])
    later = Watch("cfg_b", "candidate", (stamp + 1) / 1000, WATCH.wanted)
    feed.add("..")
    while int(feed.store.read(ROLE, "cfg_b", "candidate")[-1].id.split("-")[0]) <= stamp:
        feed.add(".")  # still the first batch's millisecond: the new stage starts after it
    fresh = states.advance(ROLE, "200.000000", [later])[0].detectors
    assert fresh[RUN_FAILURE].n < len(feed.runs) and fresh[RUN_FAILURE].events == 0
    assert redis_conn.exists(drift_key(ROLE, "cfg_b", "candidate", EPOCH, RUN_FAILURE))
    other_h = {m: Params(0.05, 0.1, 9.0, 0) for m in METRICS}
    restarted = states.advance(ROLE, EPOCH, [Watch("cfg_b", "candidate", None, other_h)])
    detector = restarted[0].detectors[RUN_FAILURE]
    assert detector.params.h == 9.0 and detector.n == len(feed.runs)


def test_p0_from_the_window_aggregate_and_when_it_restarts() -> None:
    """p0 is the aggregate's rate (at its upper bound) once it has min_reference runs;
    a doubled reference restarts."""
    window = WindowStats({"n": 40, "passes": 36, "error_runs": 2, "forbidden": 0})
    policy = DriftPolicy(shift=0.05, h=4.0)
    assert params_for(RUN_FAILURE, policy, window, 50) is None
    params = params_for(RUN_FAILURE, policy, window, 20)
    assert params == Params(bounded_p0(0.1, 40), 0.05, 4.0, 40, 0.1)
    assert params_for(TOOL_ERROR, policy, window, 20) == Params(bounded_p0(0.05, 40), 0.05,
                                                                4.0, 40, 0.05)
    assert params_for(FORBIDDEN_CALL, policy, window, 20) == Params(bounded_p0(0.0, 40), 0.05,
                                                                    4.0, 40, 0.0)
    fixed = DriftPolicy(baseline={RUN_FAILURE: 0.2})
    assert params_for(RUN_FAILURE, fixed, WindowStats(), 20) == Params(
        0.2, 0.05, derived_h(fixed, 0.2), 0, derived=True)
    detector = Detector(RUN_FAILURE, params)
    assert not detector.outdated(Params(0.12, 0.05, 4.0, 79))
    assert detector.outdated(Params(0.12, 0.05, 4.0, 80))
    assert detector.outdated(Params(0.1, 0.05, 5.0, 40))
    settled = Detector(RUN_FAILURE, Params(0.1, 0.05, 4.0, SETTLED_REFERENCE))
    assert not settled.outdated(Params(0.2, 0.05, 4.0, 10 * SETTLED_REFERENCE))


def test_a_derived_h_that_only_followed_p0_does_not_restart_the_detector() -> None:
    """A measured p0 whose third digit flips as runs arrive changes its derived h: the
    detector keeps its frozen p0 and h (no replay at every read); a changed alpha at the
    same p0, or a policy's fixed h, still restarts it."""
    policy = DriftPolicy(shift=0.05)
    first = params_for(RUN_FAILURE, policy, WindowStats({"n": 4000, "passes": 3795}), 20)
    moved = params_for(RUN_FAILURE, policy, WindowStats({"n": 4100, "passes": 3888}), 20)
    assert first is not None and moved is not None and first.derived
    assert first.p0 != moved.p0 and first.h != moved.h
    detector = Detector(RUN_FAILURE, first)
    assert not detector.outdated(moved)
    stricter = params_for(RUN_FAILURE, policy, WindowStats({"n": 4000, "passes": 3795}), 20,
                          alpha=0.001)
    assert stricter is not None and stricter.p0 == first.p0 and stricter.h != first.h
    assert detector.outdated(stricter)
    fixed = params_for(RUN_FAILURE, DriftPolicy(shift=0.05, h=9.0),
                       WindowStats({"n": 4100, "passes": 3888}), 20)
    assert fixed is not None and detector.outdated(fixed)


def test_detector_fed_in_chunks_matches_replay_and_skips_counted_entries() -> None:
    """Pure: overlapping chunks count each entry once and end where replay ends."""
    runs = [Run(f"k{i}", passed=c == ".") for i, c in enumerate("..FF.F..FFFF.F.FFF..")]
    entries = [(f"{1000 + i}-0", run) for i, run in enumerate(runs)]
    detector = Detector(RUN_FAILURE, Params(0.1, 0.1, 2.0, 0))
    for low, high in ((0, 7), (3, 12), (12, 12), (5, 20)):
        detector = detector.advance(entries[low:high])
    assert detector.report() == replay(RUN_FAILURE, runs, p0=0.1, shift=0.1, h=2.0)
    assert detector.last_id == "1019-0" and detector.report().alarms >= 1
    assert detector.first_alarm_id == entries[(detector.first_alarm_at or 0) - 1][0]


def test_gate_view_advances_kept_detectors_as_runs_arrive(client: Any) -> None:
    """The gate view's drift counts each new run once, p0 frozen from current's aggregate."""
    from router.dashboard.data import role_detail
    from tests.conftest import CALLER, OPERATOR, auth
    from tests.population import trace

    policy = {"thresholds": {"min_samples": 20},
              "invariants": {"artifact_exists": ["out.md"], "forbidden_tools": ["delete_all"]},
              "drift": {"shift": 0.1, "h": 4.0}}
    answer = client.put("/v1/bindings/d", headers=auth(OPERATOR), json={
        "current": "cfg-a", "candidate": "cfg-bad", "stage": "shadow", "gate": policy})
    assert answer.status_code == 201, answer.text

    def post(low: int, high: int) -> dict[str, Any]:
        traces = [trace("d", config, arm, i, "t") for i in range(low, high)
                  for config, arm in (("cfg-a", "current"), ("cfg-bad", "shadow"))]
        assert client.post("/v1/traces", headers=auth(CALLER),
                           json={"traces": traces}).status_code == 200
        view = client.get("/v1/roles/d/gate", headers=auth(CALLER))
        assert view.status_code == 200
        drift: dict[str, Any] = view.get_json()["drift"]
        return drift

    assert post(0, 10)["candidate"] == {}  # 10 current runs: too few to freeze p0
    first = post(10, 40)["candidate"][RUN_FAILURE]
    # p0 is current's rate (2 of 40 failed) at its upper bound over those 40 runs.
    bound = bounded_p0(0.05, 40)
    assert (first["n"], first["reference"], first["observed"]) == (40, 40, 0.05)
    assert first["p0"] == bound > 0.05
    drift = post(40, 70)
    later = drift["candidate"][RUN_FAILURE]
    assert (later["n"], later["reference"], later["p0"]) == (70, 40, bound)
    assert drift["caught_up"] is True and later["caught_up"] is True
    assert drift["current"][RUN_FAILURE]["n"] == 70
    shadow = [Run(f"job-{i}", passed=i % 20 not in (0, 1, 2)) for i in range(70)]
    expected = replay(RUN_FAILURE, shadow, p0=bound, shift=0.1, h=4.0).as_dict()
    assert {k: later[k] for k in expected} == expected
    app = client.application
    detail = role_detail(app.extensions["rolegate"].store,
                         TraceStore(app.extensions["rolegate"].redis), "d", time.time())
    assert set(detail["cusum"]) == set(drift["candidate"]) == set(METRICS)


def test_latest_reads_the_newest_runs_in_pages(redis_conn: redis.Redis,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`latest` pages through the stream: the newest `count` runs, oldest first, none twice."""
    from gatekeeper.view import sections

    monkeypatch.setattr(sections, "LATEST_PAGE", 4)
    feed = Feed(redis_conn)
    feed.add(".F.E.X.F..E.F")  # 13 runs: three pages and a bit
    traces = feed.store
    for count in (13, 50, 9, 4, 3, 1):
        got = sections.latest(traces, ROLE, "cfg_b", "candidate", count)
        want = feed.runs[-count:]
        # The stream keeps a run's verdict and flags, not its tool sequence.
        assert [(r.key, r.passed, r.tool_error, r.forbidden_call) for r in got] == \
            [(r.key, r.passed, r.tool_error, r.forbidden_call) for r in want], count
