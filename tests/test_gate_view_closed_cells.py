"""Closed cells kept apart from the window hash: every read and the whole gate view stay exact.

The truth each step is checked against is the windows built in memory from every
trace stored (`WindowStats.add`), and the sections computed afresh from them; the
gate view of two trace stores (two routers: each keeps its own closed cells and
sections) equals that of a fresh store, which keeps nothing.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from bindings.models import Binding, GatePolicy, Stage
from bindings.store import BindingStore
from gatekeeper.checks.invariants import check
from gatekeeper.stats.concurrent import BUCKET_S, closed_before
from gatekeeper.store import window_reads
from gatekeeper.store.exposures import Exposure, ExposureStore
from gatekeeper.store.trace_ingest import Checked
from gatekeeper.store.trace_keys import closed_key, epoch_of, window_key
from gatekeeper.store.traces import TraceStore
from gatekeeper.store.window_closed import GEN
from gatekeeper.view import kept
from gatekeeper.view.build import gate_view
from gatekeeper.view.concurrent import concurrent_section
from gatekeeper.view.context import GateContext, context_of
from gatekeeper.view.reports import missing_for, report_counts, reports_section
from gatekeeper.window import WindowStats
from tests.test_gate_view_fast import GATE, ROLE, trace

RUNS = 900
CONFIGS = {"current": "cfg_a", "candidate": "cfg_b"}


class Filled:
    """A canary stage filled in Redis, and the same runs folded in memory per arm."""

    def __init__(self, connection: redis.Redis, since: float, version: int = 0) -> None:
        self.connection = connection
        self.binding = Binding(current="cfg_a", candidate="cfg_b", stage=Stage.CANARY,
                               share=0.1, stage_since=since,
                               gate=GatePolicy.model_validate(
                                   {**GATE, "reports": {"missing_runs": "fail"}}))
        BindingStore(connection).write(ROLE, self.binding, expected_version=version,
                                       actor="test", action="create", reason="test")
        self.epoch = epoch_of(self.binding)
        self.memory = {arm: WindowStats() for arm in CONFIGS}
        self.writer = TraceStore(connection)

    def add(self, arm_runs: list[tuple[int, float]], one_by_one: bool = False) -> None:
        """Store run i of each arm, ended at the time given, and count it in memory (a run id
        is stored once: each is new)."""
        items, assigned = [], {}
        for i, ended in arm_runs:
            for arm in CONFIGS:
                t = trace(arm, i, ended)
                verdict = check(t, self.binding.gate.invariants)
                items.append(Checked(t, verdict, self.epoch))
                self.memory[arm].add(t, verdict)
                bucket = int((ended - t.latency_s) // 30)
                assigned[(arm, bucket)] = assigned.get((arm, bucket), 0) + 1 + (i % 50 == 0)
        for low in range(0, len(items), 1 if one_by_one else 400):
            self.writer.add(items[low:low + (1 if one_by_one else 400)])
        ExposureStore(self.connection).add(
            Exposure(ROLE, CONFIGS[arm], arm, self.epoch, bucket, n)
            for (arm, bucket), n in assigned.items())

    def truth(self, traces: TraceStore, now: float) -> tuple[GateContext, dict[str, Any]]:
        """The context over the in-memory windows, and its sections computed afresh."""
        record = BindingStore(self.connection).get(ROLE)
        arms = {arm: (CONFIGS[arm], WindowStats(dict(self.memory[arm].fields)))
                for arm in CONFIGS}
        arms["shadow"] = ("cfg_b", WindowStats())
        ctx = GateContext(ROLE, record, self.epoch, arms, traces, now)
        return ctx, sections(ctx, fresh=True)


def sections(ctx: GateContext, fresh: bool = False) -> dict[str, Any]:
    """The sections read from the cells and report buckets, kept between views or
    (`fresh`) computed afresh. (The arms section shows each reporter's evidence: compared
    in the whole view.)"""
    counts = report_counts(ctx)
    missing = missing_for(ctx, counts)
    if fresh:
        return {"concurrent": concurrent_section(ctx, missing),
                "reports": reports_section(ctx, counts)}
    return {"concurrent": kept.concurrent(ctx, missing), "reports": kept.reports(ctx, counts)}


def check_all(stage: Filled, routers: list[TraceStore], now: float) -> dict[str, Any]:
    """Each router's windows, sections and whole view equal the truth and a fresh store's."""
    bindings = BindingStore(stage.connection)
    truth_ctx, truth = stage.truth(routers[0], now)
    views = []
    for traces in routers:
        ctx = context_of(bindings.get(ROLE), traces, now)
        for arm in CONFIGS:
            assert ctx.arms[arm][1] == truth_ctx.arms[arm][1], arm
        assert sections(ctx) == truth
        views.append(gate_view(bindings, traces, ROLE, now))
    # A store that keeps nothing (it reads the closed cells whole, computes every section).
    assert views == [gate_view(bindings, TraceStore(stage.connection), ROLE, now)] * len(views)
    whole = TraceStore(stage.connection).windows(
        ROLE, [(config, arm) for arm, config in CONFIGS.items()], stage.epoch)
    assert whole == [truth_ctx.arms[arm][1] for arm in CONFIGS]
    return truth


@pytest.fixture
def small_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Move closed cells once a window holds 40 of them (512 shipped)."""
    monkeypatch.setattr(window_reads, "MOVE_AT", 40)


def test_views_over_moved_cells_equal_the_whole_recomputation(
        redis_conn: redis.Redis, small_moves: None) -> None:
    """Moves, late runs in moved and unmoved buckets, a move by another router, buckets
    closing, expiry and a new stage: every view equals the truth."""
    start = time.time() - RUNS * BUCKET_S / 3 - 6 * BUCKET_S
    stage = Filled(redis_conn, start)
    stage.add([(i, start + BUCKET_S + i * BUCKET_S / 3) for i in range(RUNS - 20)])
    stage.add([(i, start + BUCKET_S + i * BUCKET_S / 3) for i in range(RUNS - 20, RUNS)],
              one_by_one=True)  # some increments still pending
    one, two = TraceStore(redis_conn), TraceStore(redis_conn)
    now = time.time()
    key = closed_key(ROLE, "cfg_b", "candidate", stage.epoch)
    cell_fields = [f for f in redis_conn.hkeys(window_key(ROLE, "cfg_b", "candidate",
                                                          stage.epoch)) if f[:1] == b"c"]
    first = check_all(stage, [one, two], now)  # router one's first read moved the cells
    gen = redis_conn.hget(key, GEN)
    assert gen is not None and redis_conn.hlen(key) > 300
    still = [f for f in redis_conn.hkeys(window_key(ROLE, "cfg_b", "candidate", stage.epoch))
             if f[:3] in (b"cn:", b"cf:", b"ce:", b"cx:")]
    assert len(still) < 40 < len(cell_fields)
    window_ttl = redis_conn.pttl(window_key(ROLE, "cfg_b", "candidate", stage.epoch))
    assert abs(redis_conn.pttl(key) - window_ttl) < 5_000
    assert first["concurrent"]["metrics"]["run_failure"]["cells"] > 400
    assert first["concurrent"]["missing"] is not None

    # Read again: the kept closed-cells hash and sections serve, unchanged.
    assert check_all(stage, [one, two], now) == first
    assert one._closed_cells[(ROLE, "cfg_b", "candidate", stage.epoch)].gen == gen.decode()

    # A late run in a moved bucket (it lands in the window hash), one in an unmoved
    # closed bucket, one in an open bucket.
    cut = closed_before(now) - 1
    stage.add([(RUNS + 1, start + 2 * BUCKET_S)])
    assert closed_before(start + 2 * BUCKET_S) < cut
    stage.add([(RUNS + 2, (cut + 0.5) * BUCKET_S), (RUNS + 3, now)], one_by_one=True)
    late = check_all(stage, [one, two], now)
    assert late["concurrent"] != first["concurrent"]
    assert redis_conn.hget(key, GEN) == gen  # too few to move again

    # Enough late runs in moved buckets that router two moves them: router one's kept
    # closed-cells hash is stale, and it reads the new one.
    stage.add([(RUNS + 10 + k, start + (2 + k) * BUCKET_S) for k in range(60)])
    check_all(stage, [two], now)
    assert redis_conn.hget(key, GEN) != gen
    moved = check_all(stage, [one, two], now)
    assert moved["concurrent"] != late["concurrent"]

    # Buckets close as time goes on.
    later = check_all(stage, [one, two], now + 3 * BUCKET_S)
    assert later["concurrent"]["closed_before"] == moved["concurrent"]["closed_before"] + 3

    # A new binding version in the same stage.
    store = BindingStore(redis_conn)
    record = store.get(ROLE)
    store.write(ROLE, record.binding.model_copy(update={"share": 0.2}),
                expected_version=record.version, actor="test", action="set", reason="test")
    check_all(stage, [one, two], now)

    # The windows expire (a stage idle past its TTL), then runs come again.
    for kind in ("window", "pending", "reporters"):
        for key_ in redis_conn.keys(f"rolegate:{{{ROLE}}}:{kind}:*"):
            redis_conn.delete(key_)
    for arm in CONFIGS:
        stage.memory[arm] = WindowStats()
    stage.add([(RUNS + 100 + k, start + (3 + k) * BUCKET_S) for k in range(30)])
    check_all(stage, [one, two], now)

    # A new stage: a new epoch, its own windows and closed-cells hashes.
    since = time.time() - 300 * BUCKET_S
    record = store.get(ROLE)
    stage2 = Filled(redis_conn, since, version=record.version)
    stage2.add([(10_000 + i, since + BUCKET_S + i * BUCKET_S / 3) for i in range(600)])
    check_all(stage2, [one, two], now)
    assert redis_conn.exists(closed_key(ROLE, "cfg_b", "candidate", stage2.epoch))


def test_ingest_keeps_the_closed_cells_as_long_as_its_window(
        redis_conn: redis.Redis, small_moves: None) -> None:
    """A trace stored after a move gives the closed-cells hash the window's TTL again."""
    start = time.time() - 400 * BUCKET_S
    stage = Filled(redis_conn, start)
    stage.add([(i, start + BUCKET_S + i * BUCKET_S / 3) for i in range(1_000)])
    context_of(BindingStore(redis_conn).get(ROLE), TraceStore(redis_conn), time.time())
    key = closed_key(ROLE, "cfg_b", "candidate", stage.epoch)
    window = window_key(ROLE, "cfg_b", "candidate", stage.epoch)
    assert redis_conn.exists(key)
    redis_conn.expire(key, 60)
    redis_conn.expire(window, 60)
    stage.add([(5_000, time.time())], one_by_one=True)
    assert redis_conn.ttl(key) == redis_conn.ttl(window) > 1_000


def test_a_long_window_moves_in_parts_and_stays_exact(
        redis_conn: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most MOVE_AT_MOST fields a move: a window with more moves over several views."""
    monkeypatch.setattr(window_reads, "MOVE_AT", 40)
    monkeypatch.setattr(window_reads, "MOVE_AT_MOST", 100)
    start = time.time() - 400 * BUCKET_S
    stage = Filled(redis_conn, start)
    stage.add([(i, start + BUCKET_S + i * BUCKET_S / 3) for i in range(1_000)])
    key = closed_key(ROLE, "cfg_b", "candidate", stage.epoch)
    router = TraceStore(redis_conn)
    sizes = []
    for _ in range(4):
        check_all(stage, [router], time.time())
        sizes.append(redis_conn.hlen(key))
    # Three reads a check: the router's context and view, then a fresh store's view.
    assert sizes[0] == 3 * 100 + 1 < sizes[1] <= sizes[-1]


def test_with_moves_off_views_read_but_never_move(
        redis_conn: redis.Redis, small_moves: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """ROLEGATE_MOVE_CLOSED_CELLS=0 (a rolling upgrade from a release that reads the
    window hash alone): views move nothing and stay exact; turned on, they move, and
    turned off again, cells already moved are still read."""
    from gatekeeper.store import window_closed

    monkeypatch.setattr(window_closed, "MOVE_CLOSED", False)
    start = time.time() - 400 * BUCKET_S
    stage = Filled(redis_conn, start)
    stage.add([(i, start + BUCKET_S + i * BUCKET_S / 3) for i in range(1_000)])
    key = closed_key(ROLE, "cfg_b", "candidate", stage.epoch)
    router, now = TraceStore(redis_conn), time.time()
    unmoved = check_all(stage, [router], now)
    assert not redis_conn.exists(key)
    monkeypatch.setattr(window_closed, "MOVE_CLOSED", True)
    check_all(stage, [router], now)
    assert redis_conn.hlen(key) > 300
    monkeypatch.setattr(window_closed, "MOVE_CLOSED", False)
    assert check_all(stage, [router, TraceStore(redis_conn)], now)["concurrent"] \
        == unmoved["concurrent"]


@pytest.mark.parametrize("raw", ["yes", "2", "off"])
def test_a_bad_move_setting_is_refused_naming_the_variable(
        raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anything but 0 or 1 stops the process at start, naming the variable."""
    from gatekeeper.store import window_closed

    monkeypatch.setenv("ROLEGATE_MOVE_CLOSED_CELLS", raw)
    with pytest.raises(ValueError, match="ROLEGATE_MOVE_CLOSED_CELLS must be 0 or 1"):
        window_closed._moving("ROLEGATE_MOVE_CLOSED_CELLS")


def test_a_reader_new_to_the_reporters_and_the_closed_cells_needs_one_read_more(
        redis_conn: redis.Redis, small_moves: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold process learns the reporters' names and the closed cells in the same extra
    read (two reads, not three: four attempts leave room for reporters that appear)."""
    start = time.time() - 400 * BUCKET_S
    stage = Filled(redis_conn, start)
    stage.add([(i, start + BUCKET_S + i * BUCKET_S / 3) for i in range(1_000)])
    pairs = [(config, arm) for arm, config in CONFIGS.items()]
    TraceStore(redis_conn).stage_windows(ROLE, pairs, stage.epoch)  # moves the cells
    assert redis_conn.exists(closed_key(ROLE, "cfg_b", "candidate", stage.epoch))
    cold, reads = TraceStore(redis_conn), []
    real = cold._read_stage

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(cold, "_read_stage", counted)
    cold.stage_windows(ROLE, pairs, stage.epoch)
    assert len(reads) == 2
