"""Pending increments: ingest appends and folds them, readers add what is pending and never write."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from bindings.models import Invariants
from gatekeeper.checks.invariants import check
from gatekeeper.store.trace_ingest import Checked
from gatekeeper.store.trace_keys import pending_key, reporter_window_key, window_key
from gatekeeper.store.traces import TraceStore
from gatekeeper.store.window_fold import FOLD_AT, pending_counts
from gatekeeper.window import WindowStats
from rolegate.trace import Trace

EPOCH = "100.000000"
INV = Invariants(forbidden_tools=("egress",), max_steps=3)
STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
#: Reporter names the entry format must carry whole: a colon and digits (the
#: length prefix's own characters), non-ASCII (bytes, not characters, counted).
REPORTERS = ["team-a", "12:ops", "équipe", None]
PENDING = pending_key("summarizer", "cfg_b", "candidate", EPOCH)


def trace(i: int, reporter: str | None, **fields: Any) -> Trace:
    """Trace number `i`: varied tools, steps, cost and outcome, stamped by `reporter`."""
    tools = ["read"] * (i % 4) + (["egress"] if i % 17 == 0 else [])
    data: dict[str, Any] = {"run_id": f"r{i}", "role": "summarizer", "config": "cfg_b",
                            "arm": "candidate", "stamps": STAMPS, "tools": tools,
                            "cost_usd": 0.001 * (i % 9), "tokens": 10 * i, "time": 1.0,
                            "answered": i % 3 != 0, "tool_errors": int(i % 5 == 0)}
    if reporter is not None:
        data["reporter"] = reporter
    return Trace.model_validate({**data, **fields})


@pytest.fixture
def store(redis_conn: redis.Redis) -> TraceStore:
    """A trace store on the test database."""
    return TraceStore(redis_conn)


def test_single_traces_fold_exactly_and_the_list_stays_bounded(
        store: TraceStore, redis_conn: redis.Redis) -> None:
    """Hundreds of one-trace adds from several reporters: windows exact, never FOLD_AT waiting."""
    traces = [trace(i, REPORTERS[i % len(REPORTERS)]) for i in range(3 * FOLD_AT + 7)]
    longest = 0
    for t in traces:
        store.add([Checked(t, check(t, INV), EPOCH)])
        longest = max(longest, int(redis_conn.llen(PENDING)))
    assert 0 < longest < FOLD_AT  # folded by ingest itself, not only by readers
    assert redis_conn.llen(PENDING) == len(traces) % FOLD_AT  # 7 still waiting
    window = store.window("summarizer", "cfg_b", "candidate", EPOCH)
    assert window == WindowStats.from_traces(traces, INV)
    assert window.n == len(traces) and window.forbidden > 0
    assert redis_conn.llen(PENDING) == len(traces) % FOLD_AT  # reads write nothing

    [by] = store.windows_by_reporter("summarizer", [("cfg_b", "candidate")], EPOCH)
    named = [r for r in REPORTERS if r is not None]
    assert sorted(by) == sorted(named)
    for name in named:
        own = [t for t in traces if t.reporter == name]
        assert by[name] == WindowStats.from_traces(own, INV), name
    # Unstamped traces count in the window and in no reporter's.
    assert sum(w.n for w in by.values()) == len([t for t in traces if t.reporter])


def test_a_read_sees_every_trace_added_before_it(store: TraceStore,
                                                 redis_conn: redis.Redis) -> None:
    """Traces still pending are in the very next read, by reporter too."""
    traces = [trace(i, "team-a") for i in range(5)]
    for t in traces:
        store.add([Checked(t, check(t, INV), EPOCH)])
    assert redis_conn.llen(PENDING) == 5
    assert not redis_conn.exists(window_key("summarizer", "cfg_b", "candidate", EPOCH))
    [by] = store.windows_by_reporter("summarizer", [("cfg_b", "candidate")], EPOCH)
    assert by == {"team-a": WindowStats.from_traces(traces, INV)}
    assert store.window("summarizer", "cfg_b", "candidate", EPOCH).n == 5
    assert redis_conn.llen(PENDING) == 5


def test_a_long_entry_is_folded_at_once_and_retries_add_none(
        store: TraceStore, redis_conn: redis.Redis) -> None:
    """A batch's entry (over FOLD_NOW_BYTES) never waits; a retried run id adds no entry."""
    short = trace(1000, "team-a")
    store.add([Checked(short, check(short, INV), EPOCH)])
    assert redis_conn.llen(PENDING) == 1
    traces = [trace(i, "team-a", tools=[f"tool{i}"]) for i in range(60)]
    store.add([Checked(t, check(t, INV), EPOCH) for t in traces])
    assert not redis_conn.exists(PENDING)  # folded, the short entry with it
    store.add([Checked(t, check(t, INV), EPOCH) for t in traces[:10]])
    assert not redis_conn.exists(PENDING)
    assert store.window("summarizer", "cfg_b", "candidate", EPOCH) == \
        WindowStats.from_traces([short, *traces], INV)


def test_reads_work_while_redis_refuses_writes(store: TraceStore,
                                               redis_conn: redis.Redis) -> None:
    """Out of memory (noeviction), ingest is refused but a read still counts what is pending."""
    traces = [trace(i, "team-a") for i in range(5)]
    for t in traces:
        store.add([Checked(t, check(t, INV), EPOCH)])
    policy = redis_conn.config_get("maxmemory-policy")["maxmemory-policy"]
    redis_conn.config_set("maxmemory-policy", "noeviction")
    redis_conn.config_set("maxmemory", 1)
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            redis_conn.set("probe", "1")
        [by] = store.windows_by_reporter("summarizer", [("cfg_b", "candidate")], EPOCH)
        assert by == {"team-a": WindowStats.from_traces(traces, INV)}
        assert store.window("summarizer", "cfg_b", "candidate", EPOCH).n == 5
    finally:
        redis_conn.config_set("maxmemory", 0)
        redis_conn.config_set("maxmemory-policy", policy)


def test_sums_past_two_to_the_53_stay_exact(store: TraceStore) -> None:
    """Lua adds in doubles: a fold of huge token counts still stores every unit."""
    tokens = 10**12 - 1  # odd, in batches of 199: odd sums, which doubles past 2^53 round
    batches = [[trace(b * 199 + i, "team-a", tokens=tokens, tools=[])
                for i in range(199)] for b in range(FOLD_AT)]
    for batch in batches:
        store.add([Checked(t, check(t, INV), EPOCH) for t in batch])
    window = store.window("summarizer", "cfg_b", "candidate", EPOCH)
    assert window.fields["tokens"] == FOLD_AT * 199 * tokens > 2**53


def test_folded_keys_expire_with_the_window(store: TraceStore,
                                            redis_conn: redis.Redis) -> None:
    """Pending list, window, reporter windows and reporters set all carry the window's TTL."""
    short = TraceStore(redis_conn, window_ttl_s=500)
    t = trace(1, "team-a")
    short.add([Checked(t, check(t, INV), EPOCH)])
    assert 0 < redis_conn.ttl(PENDING) <= 500
    for i in range(2, FOLD_AT + 1):
        t = trace(i, "team-a")
        short.add([Checked(t, check(t, INV), EPOCH)])
    for key in (window_key("summarizer", "cfg_b", "candidate", EPOCH),
                reporter_window_key("summarizer", "cfg_b", "candidate", EPOCH, "team-a"),
                "rolegate:{summarizer}:reporters:cfg_b:candidate:" + EPOCH):
        assert 0 < redis_conn.ttl(key) <= 500, key


def test_the_script_builds_reporter_keys_as_the_store_names_them() -> None:
    """The fold writes `<window>:by:<reporter>`; readers use reporter_window_key."""
    window = window_key("r", "c", "a", EPOCH)
    assert reporter_window_key("r", "c", "a", EPOCH, "x:1") == window + ":by:x:1"


def test_each_trace_keeps_the_folded_window_alive(redis_conn: redis.Redis) -> None:
    """A window folded long ago lives on while traces keep arriving (they wait in the list)."""
    store = TraceStore(redis_conn, window_ttl_s=500)
    for i in range(FOLD_AT):
        t = trace(i, "team-a")
        store.add([Checked(t, check(t, INV), EPOCH)])
    folded = (window_key("summarizer", "cfg_b", "candidate", EPOCH),
              reporter_window_key("summarizer", "cfg_b", "candidate", EPOCH, "team-a"),
              "rolegate:{summarizer}:reporters:cfg_b:candidate:" + EPOCH)
    for key in folded:
        redis_conn.expire(key, 5)  # as if folded 495 s ago
    late = trace(FOLD_AT, "team-a")
    store.add([Checked(late, check(late, INV), EPOCH)])
    for key in folded:
        assert redis_conn.ttl(key) > 400, key


def test_pending_counts_reads_the_entries_the_script_writes() -> None:
    """The Python reader of entries: byte-length prefix, reporterless entries, summed values."""
    entries = [b"6:team-an\n1\ntool:x\n2\n", b"0:n\n3\n",
               "7:\u00e9quipen\n1\n".encode()]  # str entries (decode_responses) too
    total, by = pending_counts(entries)
    assert total == {"n": 5, "tool:x": 2}
    assert by == {"team-a": {"n": 1, "tool:x": 2}, "\u00e9quipe": {"n": 1}}
    assert pending_counts([e.decode() for e in entries]) == (total, by)
