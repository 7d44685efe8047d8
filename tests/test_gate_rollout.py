"""The gate view's `rollout` section over HTTP and a real Redis: the earlier stages' counts."""

from __future__ import annotations

import time
from typing import Any

import redis

from bindings.models import VersionedBinding
from bindings.store import BindingStore
from gatekeeper.machine.decide import decide, evidence_from_view
from gatekeeper.store.rollout import RolloutReader
from gatekeeper.store.traces import TraceStore
from tests.conftest import CALLER, OPERATOR, auth
from tests.population import trace

OP = auth(OPERATOR)
POLICY = {"thresholds": {"min_samples": 20, "min_stage_seconds": 0, "bake_seconds": 0},
          "invariants": {"artifact_exists": ["out.md"]}}


def _post(client: Any, role: str, config: str, arm: str, jobs: range, tag: str = "r") -> None:
    traces = [trace(role, config, arm, i, tag) for i in jobs]
    answer = client.post("/v1/traces", headers=auth(CALLER), json={"traces": traces})
    assert answer.status_code == 200, answer.text


def _gate(client: Any, role: str) -> dict[str, Any]:
    answer = client.get(f"/v1/roles/{role}/gate", headers=auth(CALLER))
    assert answer.status_code == 200, answer.text
    view: dict[str, Any] = answer.get_json()
    return view


def _move(client: Any, role: str, move: str) -> None:
    answer = client.post(f"/v1/bindings/{role}/{move}", json={"reason": "test"}, headers=OP)
    assert answer.status_code == 200, answer.text
    time.sleep(0.01)  # traces posted next arrive after the new stage began


def _shadow(client: Any, role: str, candidate: str) -> None:
    answer = client.put(f"/v1/bindings/{role}", headers=OP, json={
        "current": "cfg-a", "candidate": candidate, "stage": "shadow", "gate": POLICY})
    assert answer.status_code == 201, answer.text
    time.sleep(0.01)


def test_canary_carries_shadows_runs_and_flips(client: Any) -> None:
    """After shadow -> canary 0.1 the view lists shadow's candidate runs and flips once each."""
    _shadow(client, "carry", "cfg-bad")
    _post(client, "carry", "cfg-a", "current", range(40))
    _post(client, "carry", "cfg-bad", "shadow", range(40))
    # A retried trace (the same run ids again) is stored and counted once.
    _post(client, "carry", "cfg-bad", "shadow", range(10))
    shadow_view = _gate(client, "carry")
    assert shadow_view["rollout"]["stages"] == [] and shadow_view["rollout"]["began"] == "shadow"
    flips = shadow_view["paired"]["flips"]
    _move(client, "carry", "promote")
    _post(client, "carry", "cfg-bad", "candidate", range(100, 120))
    view = _gate(client, "carry")
    section = view["rollout"]
    assert section["began"] == "shadow" and section["complete"] is True
    assert section["alpha"] == 0.01
    (shadow,) = section["stages"]
    assert shadow["stage"] == "shadow" and shadow["epoch"] == shadow_view["window"]["epoch"]
    # cfg-bad fails jobs 0, 1, 2 of every 20: 6 of 40 (the retried 10 not again).
    assert (shadow["n"], shadow["passes"]) == (40, 34)
    assert shadow["flips"] == flips == {"pass_to_fail": 4, "fail_to_pass": 0}
    assert section["carried"]["n"] == 40
    record = VersionedBinding.model_validate(
        client.get("/v1/bindings/carry", headers=OP).get_json())
    evidence = evidence_from_view(view)
    assert evidence.carried is not None and evidence.carried.n == 40
    sequential = decide("carry", record, evidence, view["time"]).details["sequential"]
    assert sequential["alpha"] == 0.01


def test_a_rollback_ends_the_rollout_and_re_entry_starts_afresh(client: Any) -> None:
    """Rolled back, then sent to shadow again: the new rollout has no earlier stages."""
    _shadow(client, "again", "cfg-bad")
    _post(client, "again", "cfg-bad", "shadow", range(30))
    _move(client, "again", "promote")
    _post(client, "again", "cfg-bad", "candidate", range(30, 60))
    _move(client, "again", "rollback")
    assert _gate(client, "again")["rollout"] is None
    _move(client, "again", "promote")  # rolled_back -> shadow: a new rollout
    view = _gate(client, "again")
    assert view["stage"] == "shadow"
    assert view["rollout"]["stages"] == [] and view["rollout"]["carried"]["n"] == 0
    _post(client, "again", "cfg-bad", "shadow", range(60, 70))
    _move(client, "again", "promote")
    stages = _gate(client, "again")["rollout"]["stages"]
    assert [(s["stage"], s["n"]) for s in stages] == [("shadow", 10)]


def test_a_full_stage_carries_every_earlier_stage(client: Any,
                                                 redis_conn: redis.Redis) -> None:
    """shadow, 0.1, 0.5, full: the reader finds three earlier stages with their own runs."""
    _shadow(client, "ladder", "cfg-good")
    _post(client, "ladder", "cfg-good", "shadow", range(20), "s")
    _move(client, "ladder", "promote")
    _post(client, "ladder", "cfg-good", "candidate", range(20, 25), "c1")
    _move(client, "ladder", "promote")
    _post(client, "ladder", "cfg-good", "candidate", range(25, 40), "c5")
    _move(client, "ladder", "promote")
    store = BindingStore(redis_conn)
    record = store.get("ladder")
    assert record.binding.stage.value == "full"
    carried = RolloutReader(store, TraceStore(redis_conn), page=2).carried(record)
    assert carried is not None and carried.complete
    assert [(s.stage.value, s.share, s.n) for s in carried.stages] == [
        ("shadow", 0.0, 20), ("canary", 0.1, 5), ("canary", 0.5, 15)]
    cut = RolloutReader(store, TraceStore(redis_conn), lookback=2, page=2).carried(record)
    assert cut is not None and not cut.complete
