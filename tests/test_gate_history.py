"""The gate view's p0 rests on current's carried history: tests run from a stage's first tick."""

from __future__ import annotations

import time
from typing import Any

import redis

from bindings.models import Binding
from gatekeeper.stats.drift import RUN_FAILURE, bounded_p0
from gatekeeper.store.history import HistoryStore, history_key
from gatekeeper.store.trace_keys import epoch_of
from tests.conftest import CALLER, OPERATOR, auth
from tests.population import trace


def _post(client: Any, role: str, config: str, arm: str, jobs: range) -> None:
    traces = [trace(role, config, arm, i, "h") for i in jobs]
    answer = client.post("/v1/traces", headers=auth(CALLER), json={"traces": traces})
    assert answer.status_code == 200, answer.text


def test_full_stage_has_a_p0_from_current_history_before_any_current_run(
        client: Any, redis_conn: redis.Redis) -> None:
    """In full (no current traffic) the candidate detector's p0 comes from current's past runs."""
    policy = {"thresholds": {"min_samples": 20}, "invariants": {"artifact_exists": ["out.md"]}}
    answer = client.put("/v1/bindings/hist", headers=auth(OPERATOR),
                        json={"current": "cfg-a", "gate": policy})
    assert answer.status_code == 201, answer.text
    _post(client, "hist", "cfg-a", "current", range(80))  # 4 of 80 fail
    time.sleep(0.01)  # the stage starts after those runs' stream ids
    answer = client.put("/v1/bindings/hist", headers={**auth(OPERATOR), "If-Match": "1"}, json={
        "current": "cfg-a", "candidate": "cfg-good", "stage": "full", "share": 1.0,
        "gate": policy})
    assert answer.status_code == 200, answer.text
    view = client.get("/v1/roles/hist/gate", headers=auth(CALLER)).get_json()
    assert view["stage"] == "full" and view["arms"]["current"]["n"] == 0
    detector = view["drift"]["candidate"][RUN_FAILURE]
    assert (detector["reference"], detector["observed"], detector["n"]) == (80, 0.05, 0)
    assert detector["p0"] == bounded_p0(0.05, 80)
    _post(client, "hist", "cfg-good", "candidate", range(100, 130))
    view = client.get("/v1/roles/hist/gate", headers=auth(CALLER)).get_json()
    assert view["drift"]["candidate"][RUN_FAILURE]["n"] == 30
    epoch = view["window"]["epoch"]
    assert redis_conn.hgetall(history_key("hist", "cfg-a", epoch))[b"n"] == b"80"


def test_history_is_counted_once_per_stage(client: Any, redis_conn: redis.Redis) -> None:
    """Runs arriving after the first read of a stage do not change its carried history."""
    policy = {"invariants": {"artifact_exists": ["out.md"]}}
    answer = client.put("/v1/bindings/once", headers=auth(OPERATOR),
                        json={"current": "cfg-a", "gate": policy})
    assert answer.status_code == 201, answer.text
    _post(client, "once", "cfg-a", "current", range(40))
    time.sleep(0.01)
    record = client.put("/v1/bindings/once", headers={**auth(OPERATOR), "If-Match": "1"}, json={
        "current": "cfg-a", "candidate": "cfg-good", "stage": "full", "share": 1.0,
        "gate": policy})
    assert record.status_code == 200, record.text
    since = record.get_json()["binding"]["stage_since"]
    store = HistoryStore(redis_conn)
    epoch = epoch_of(Binding(current="cfg-a", stage_since=since))
    first = store.before("once", "cfg-a", epoch, since)
    _post(client, "once", "cfg-a", "candidate", range(40, 60))
    assert store.before("once", "cfg-a", epoch, since) == first
    assert first.n == 40 and first.passes == 38
