"""The tripwire against a real Redis: CAS retries, concurrent rollbacks, which breaches trip."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from bindings.errors import Conflict
from bindings.models import Binding, VersionedBinding
from bindings.store import BindingStore
from gatekeeper import tripwire
from gatekeeper.checks.invariants import check
from gatekeeper.machine.stages import Event, apply
from rolegate.trace import Trace

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
POLICY = {"invariants": {"forbidden_tools": ["web_write"]}}


def canary(store: BindingStore, share: float = 0.1) -> VersionedBinding:
    """Create summarizer on a canary of cfg_b at `share`."""
    binding = Binding.model_validate({"current": "cfg_a", "candidate": "cfg_b", "gate": POLICY})
    record = store.write("summarizer", binding, expected_version=0, actor="alice",
                         action="create", reason="test")
    move = apply(record.binding, Event.SET_SHARE, time.time(), share=share)
    return store.write("summarizer", move.binding, expected_version=record.version,
                       actor="alice", action="canary", reason="test")


def bad_trace(**fields: Any) -> Trace:
    """A candidate run of cfg_b that called the forbidden web_write."""
    data: dict[str, Any] = {"run_id": "bad", "role": "summarizer", "config": "cfg_b",
                            "arm": "candidate", "tools": ["read", "web_write"], "stamps": STAMPS}
    data.update(fields)
    return Trace.model_validate(data)


class RacingStore(BindingStore):
    """A real store where someone else writes the role just before each of our first writes."""

    def __init__(self, connection: redis.Redis, races: int) -> None:
        super().__init__(connection)
        self.races = races

    def write(self, role: str, binding: Binding, **kwargs: Any) -> VersionedBinding:
        if self.races > 0:
            self.races -= 1
            other = BindingStore(self.connection)
            current = other.get(role)
            move = apply(current.binding, Event.PAUSE if not current.binding.paused
                         else Event.RESUME, time.time())
            other.write(role, move.binding, expected_version=current.version, actor="bob",
                        action="pause", reason="racing")
        return super().write(role, binding, **kwargs)


def test_trip_rolls_back_with_details(redis_conn: redis.Redis) -> None:
    """A breach rolls the canary back, recording actor tripwire, the run and the tool."""
    store = BindingStore(redis_conn)
    canary(store)
    trace = bad_trace()
    trip = tripwire.trip(store, trace, check(trace, Binding.model_validate(
        {"current": "x", "gate": POLICY}).gate.invariants), time.time())
    assert trip is not None and trip.record.binding.share == 0.0
    entry = store.history("summarizer", limit=1)[0]
    assert (entry.actor, entry.action) == ("tripwire", "rollback")
    assert entry.details["run_id"] == "bad" and entry.details["tool"] == "web_write"


def test_trip_retries_a_lost_compare_and_set(redis_conn: redis.Redis) -> None:
    """A concurrent write makes the first CAS lose; the tripwire re-reads and rolls back."""
    canary(BindingStore(redis_conn))
    store = RacingStore(redis_conn, races=2)
    trace = bad_trace()
    verdict = check(trace, store.get("summarizer").binding.gate.invariants)
    trip = tripwire.trip(store, trace, verdict, time.time())
    assert trip is not None and trip.record.version == 5  # create, canary, 2 races, rollback
    assert trip.record.binding.stage.value == "rolled_back"


def test_trip_gives_up_with_conflict_when_always_racing(redis_conn: redis.Redis) -> None:
    """Losing every attempt raises Conflict (the ingest answers 409 and the client retries)."""
    canary(BindingStore(redis_conn))
    store = RacingStore(redis_conn, races=tripwire.ATTEMPTS)
    trace = bad_trace()
    verdict = check(trace, store.get("summarizer").binding.gate.invariants)
    with pytest.raises(Conflict):
        tripwire.trip(store, trace, verdict, time.time())


def test_already_rolled_back_is_fine(redis_conn: redis.Redis) -> None:
    """When someone already rolled back, the tripwire writes nothing."""
    store = BindingStore(redis_conn)
    record = canary(store)
    move = apply(record.binding, Event.ROLLBACK, time.time())
    store.write("summarizer", move.binding, expected_version=record.version, actor="bob",
                action="rollback", reason="manual")
    trace = bad_trace()
    assert tripwire.trip(store, trace, check(trace, record.binding.gate.invariants),
                         time.time()) is None
    assert store.get("summarizer").version == 3


def test_other_candidate_is_left_alone(redis_conn: redis.Redis) -> None:
    """A breach by a config that is no longer the candidate rolls nothing back."""
    store = BindingStore(redis_conn)
    record = canary(store)
    trace = bad_trace(config="cfg_old")
    assert tripwire.trip(store, trace, check(trace, record.binding.gate.invariants),
                         time.time()) is None


@pytest.mark.parametrize("arm, blocking, expected", [
    ("candidate", True, True), ("shadow", True, True),
    ("current", True, False), ("candidate", False, False),
])
def test_applies_to_candidate_and_shadow_breaches(arm: str, blocking: bool,
                                                  expected: bool) -> None:
    """Only zero-tolerance breaches on the candidate or shadow arm trip the wire."""
    tools = ["web_write"] if blocking else ["read"]
    trace = bad_trace(arm=arm, tools=tools)
    policy = Binding.model_validate({"current": "x", "gate": POLICY}).gate.invariants
    assert tripwire.applies(trace, check(trace, policy)) is expected
