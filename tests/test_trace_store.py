"""The Redis trace store: idempotent ingest, running aggregates, retention, reads, lookup."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from bindings.errors import InvalidInput, NotFound
from bindings.models import Invariants
from bindings.store import binding_key
from gatekeeper.checks.invariants import check
from gatekeeper.store.trace_ingest import Checked, Moved
from gatekeeper.store.trace_keys import stream_key
from gatekeeper.store.traces import TraceStore
from gatekeeper.window import WindowStats
from rolegate.trace import Trace

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
INV = Invariants(forbidden_tools=("egress",), max_steps=3)


def trace(run_id: str, **fields: Any) -> Trace:
    """A candidate trace of role summarizer, config cfg_b, with `fields` overriding."""
    data: dict[str, Any] = {"run_id": run_id, "role": "summarizer", "config": "cfg_b",
                            "arm": "candidate", "stamps": STAMPS, "tools": ["read"],
                            "cost_usd": 0.01, "time": 1.0}
    data.update(fields)
    return Trace.model_validate(data)


def checked(t: Trace, epoch: str = "100.000000") -> Checked:
    """`t` checked against the test invariants, counted in `epoch`."""
    return Checked(t, check(t, INV), epoch)


@pytest.fixture
def store(redis_conn: redis.Redis) -> TraceStore:
    """A trace store on the test database."""
    return TraceStore(redis_conn)


def test_add_then_window_counts(store: TraceStore) -> None:
    """Stored traces fold into the (role, config, arm, epoch) aggregate exactly as in memory."""
    traces = [trace(f"r{i}", tools=["read"] * (i % 5)) for i in range(30)]
    traces.append(trace("bad", tools=["egress"]))
    outcomes = store.add([checked(t) for t in traces])
    assert [o.duplicate for o in outcomes] == [False] * 31
    stored = store.window("summarizer", "cfg_b", "candidate", "100.000000")
    assert stored == WindowStats.from_traces(traces, INV)
    assert stored.n == 31 and stored.forbidden == 1
    assert store.window("summarizer", "cfg_b", "candidate", "200.000000").n == 0


def test_same_run_id_counts_once(store: TraceStore) -> None:
    """A retried run id is a duplicate: stored once and counted once, even within one batch."""
    first = store.add([checked(trace("r1")), checked(trace("r2"))])
    again = store.add([checked(trace("r1")), checked(trace("r3")), checked(trace("r3"))])
    assert [o.duplicate for o in first] == [False, False]
    assert [o.duplicate for o in again] == [True, False, True]
    assert again[0].location == first[0].location
    assert store.window("summarizer", "cfg_b", "candidate", "100.000000").n == 3
    assert store.length("summarizer", "cfg_b", "candidate") == 3
    assert store.tally("summarizer") == {"cfg_b": {"runs": 3, "tools": {"read": 3}}}


def test_groups_split_by_arm_and_config(store: TraceStore) -> None:
    """One batch spanning arms and configs lands in each one's own stream and aggregate."""
    store.add([checked(trace("a")), checked(trace("b", arm="shadow")),
               checked(trace("c", arm="current", config="cfg_a", tools=["x", "x"]))])
    assert [store.length("summarizer", c, a) for c, a in
            [("cfg_b", "candidate"), ("cfg_b", "shadow"), ("cfg_a", "current")]] == [1, 1, 1]
    tally = store.tally("summarizer")
    assert tally["cfg_a"] == {"runs": 1, "tools": {"x": 2}}
    assert tally["cfg_b"]["runs"] == 2


def test_retention_bounds_the_stream(redis_conn: redis.Redis) -> None:
    """The stream keeps about `retention` traces; the stage aggregate keeps counting."""
    store = TraceStore(redis_conn, retention=50)
    for batch in range(10):
        store.add([checked(trace(f"r{batch}-{i}")) for i in range(100)])
    length = store.length("summarizer", "cfg_b", "candidate")
    # MAXLEN ~ trims whole stream nodes (100 entries by default), never below retention.
    assert 50 <= length <= 150
    assert store.window("summarizer", "cfg_b", "candidate", "100.000000").n == 1000
    oldest = store.read("summarizer", "cfg_b", "candidate", count=1)[0]
    assert oldest.trace.run_id != "r0-0"


def test_read_in_arrival_order_with_verdicts(store: TraceStore) -> None:
    """read returns traces oldest first with their verdicts; `after` continues a read."""
    store.add([checked(trace("r1")), checked(trace("r2", tools=["egress"]))])
    store.add([checked(trace("r3"))])
    got = store.read("summarizer", "cfg_b", "candidate")
    assert [s.trace.run_id for s in got] == ["r1", "r2", "r3"]
    assert [s.verdict.passed for s in got] == [True, False, True]
    assert got[1].verdict.forbidden == ("egress",)
    assert [s.trace.run_id for s in
            store.read("summarizer", "cfg_b", "candidate", after=got[0].id)] == ["r2", "r3"]
    assert len(store.read("summarizer", "cfg_b", "candidate", count=2)) == 2
    assert got[0].to_json()["trace"]["run_id"] == "r1"


def test_read_since_time(store: TraceStore) -> None:
    """`since` returns only traces that arrived at or after that time."""
    store.add([checked(trace("old"))])
    time.sleep(0.005)
    boundary = time.time()
    time.sleep(0.005)
    store.add([checked(trace("new"))])
    got = store.read("summarizer", "cfg_b", "candidate", since=boundary)
    assert [s.trace.run_id for s in got] == ["new"]
    assert got[0].time >= boundary - 0.001


def test_lookup_by_run_id(store: TraceStore) -> None:
    """lookup finds a run's trace by run_id; an unknown run_id is NotFound."""
    store.add([checked(trace("r1", arm="shadow", output_text="hello"))])
    found = store.lookup("summarizer", "r1")
    assert found.trace.output_text == "hello" and found.trace.arm == "shadow"
    assert store.location("summarizer", "r1").epoch == "100.000000"
    with pytest.raises(NotFound):
        store.lookup("summarizer", "nope")


def test_stream_key_has_role_hash_tag() -> None:
    """Every trace key carries the role as a Redis Cluster hash tag."""
    assert stream_key("summarizer", "cfg", "shadow") == "rolegate:{summarizer}:traces:cfg:shadow"


def test_script_reloaded_after_noscript(redis_conn: redis.Redis) -> None:
    """When the server does not know the ingest script, it is loaded and the write goes through."""
    store = TraceStore(redis_conn)
    store._ingest.sha = "0" * 40  # as if Redis restarted and lost its script cache
    (outcome,) = store.add([checked(trace("r1"))])
    assert not outcome.duplicate
    assert store.window("summarizer", "cfg_b", "candidate", "100.000000").n == 1


def test_tool_name_with_line_break_refused(store: TraceStore) -> None:
    """A tool name with a line break (a Trace built unvalidated) is refused before any write."""
    # The Trace model refuses such a name; the store still defends its script's line format.
    broken = trace("r2").model_copy(update={"tools": ("a\nn\n5",)})
    with pytest.raises(InvalidInput):
        store.add([checked(trace("r1")), checked(broken)])
    assert store.length("summarizer", "cfg_b", "candidate") == 0


def test_concurrent_ingest_of_same_runs_counts_once(redis_url: str) -> None:
    """Two workers storing the same run ids at the same time store and count each once."""
    traces = [checked(trace(f"r{i}", tools=["read"] * (i % 4))) for i in range(400)]
    connections = [redis.Redis.from_url(redis_url) for _ in range(2)]
    stores = [TraceStore(c) for c in connections]
    outcomes: list[list[bool]] = [[], []]
    barrier = threading.Barrier(2)

    def work(k: int) -> None:
        barrier.wait()
        for start in range(0, 400, 40):
            batch = traces[start:start + 40]
            if k:
                batch = batch[::-1]  # overlap differently so both sides see races
            outcomes[k] += [o.duplicate for o in stores[k].add(batch)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert outcomes[0].count(False) + outcomes[1].count(False) == 400
        assert stores[0].window("summarizer", "cfg_b", "candidate", "100.000000") == \
            WindowStats.from_traces([c.trace for c in traces], INV)
        assert stores[0].length("summarizer", "cfg_b", "candidate") == 400
    finally:
        for c in connections:
            c.close()


def test_a_trace_checked_against_an_old_binding_version_is_not_written(
        store: TraceStore, redis_conn: redis.Redis) -> None:
    """The script compares the checked binding version with Redis's and writes nothing on a move."""
    redis_conn.hset(binding_key("summarizer"), "version", 3)
    stale = Checked(trace("late"), check(trace("late"), INV), "100.000000", version=2)
    (outcome,) = store.add([stale])
    assert outcome == Moved("late", 3)
    assert store.window("summarizer", "cfg_b", "candidate", "100.000000").n == 0
    assert store.length("summarizer", "cfg_b", "candidate") == 0
    with pytest.raises(NotFound):
        store.location("summarizer", "late")
    current = Checked(trace("late"), check(trace("late"), INV), "200.000000", version=3)
    (outcome,) = store.add([current])
    assert not isinstance(outcome, Moved) and outcome.location.epoch == "200.000000"
    assert store.window("summarizer", "cfg_b", "candidate", "200.000000").n == 1
