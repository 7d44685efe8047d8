"""Run-id squatting: another token's traces under a reporter's run ids never shadow its runs.

Run ids are often predictable (`eval-<role>-<n>`). Ingest once deduplicated on
the bare run id, so a caller token could post passing traces under the ids of
the trusted fleet's failing runs first: the fleet's real runs came back
`duplicate`, the counted pass rate went from 0.625 to 1.0, and the gatekeeper
promoted. Run ids are now known per reporter; a clash is stored, counted in the
gate view, logged, and raises no pass rate.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from bindings.models import Invariants
from gatekeeper.checks.invariants import check
from gatekeeper.loop import tick
from gatekeeper.machine.decide import Action
from gatekeeper.store.trace_ingest import Checked
from gatekeeper.store.traces import TraceStore
from rolegate.http import ApiClient
from rolegate.trace import Trace
from router import create_app
from tests.conftest import GATEKEEPER, OPERATOR, TOKENS, auth
from tests.servers import werkzeug_server

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
FLEET = "fleet-secret"
SQUATTER = "squatter-secret"
GATE = {"thresholds": {"min_samples": 20, "min_pass_rate": 0.8, "alpha": 0.05,
                       "min_stage_seconds": 0.0, "bake_seconds": 0.0},
        "invariants": {"forbidden_tools": ["web_write"], "max_steps": 3}}
#: The fleet's 40 candidate runs: 25 pass, 15 fail (too many steps): 0.625.
FAILING = range(25, 40)


def _trace(run_id: str, *, passing: bool, arm: str = "candidate") -> dict[str, Any]:
    return {"run_id": run_id, "role": "r", "config": "cfg_b" if arm == "candidate" else "cfg_a",
            "arm": arm, "key": f"job-{run_id}", "tools": ["read"] * (1 if passing else 5),
            "stamps": STAMPS}


def _fleet_runs() -> list[dict[str, Any]]:
    runs = [_trace(f"eval-r-{i}", passing=i not in FAILING) for i in range(40)]
    runs += [_trace(f"eval-r-cur-{i}", passing=True, arm="current") for i in range(40)]
    return runs


def _app(redis_url: str, trusted: list[str] | None) -> Flask:
    app = create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05,
                      "tokens": f"{TOKENS},fleet={FLEET}:caller:r,squatter={SQUATTER}:caller:r"})
    gate = {**GATE, **({"trusted_reporters": trusted} if trusted else {})}
    r = app.test_client().put("/v1/bindings/r", headers=auth(OPERATOR), json={
        "current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5,
        "steps": [0.5, 1.0], "gate": gate})
    assert r.status_code == 201, r.json
    return app


@pytest.fixture
def trusted_app(redis_url: str) -> Iterator[Flask]:
    """Role `r` on a 50% canary whose gate trusts only reporter `fleet`."""
    app = _app(redis_url, ["fleet"])
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def _squat(app: Flask) -> None:
    """The squatter posts passing traces under the ids of the fleet's 15 failing runs, first."""
    squat = [_trace(f"eval-r-{i}", passing=True) for i in FAILING]
    r = app.test_client().post("/v1/traces", headers=auth(SQUATTER), json={"traces": squat})
    assert r.status_code == 200 and r.json["accepted"] == 15, r.json


def test_squatted_run_ids_do_not_shadow_the_trusted_fleet(trusted_app: Flask,
                                                           caplog: pytest.LogCaptureFixture,
                                                           ) -> None:
    """The fleet's runs count (0.625), the 15 clashes show, and the gatekeeper rolls back."""
    client = trusted_app.test_client()
    _squat(trusted_app)
    with caplog.at_level(logging.INFO, logger="rolegate.events"):
        r = client.post("/v1/traces", headers=auth(FLEET), json={"traces": _fleet_runs()})
    assert r.status_code == 200, r.json
    assert (r.json["accepted"], r.json["duplicates"]) == (80, 0)
    clashed = [x["run_id"] for x in r.json["results"] if x.get("clash")]
    assert clashed == [f"eval-r-{i}" for i in FAILING]
    lines = [json.loads(m) for m in caplog.messages if '"run_id_clash"' in m]
    assert {(x["run_id"], x["reporter"], tuple(x["claimed_by"])) for x in lines} == {
        (f"eval-r-{i}", "fleet", ("squatter",)) for i in FAILING}

    view = client.get("/v1/roles/r/gate", headers=auth(OPERATOR)).json
    candidate = view["arms"]["candidate"]
    assert (candidate["n"], candidate["pass_rate"]) == (40, 0.625)
    assert candidate["clashes"] == 15
    assert candidate["by_reporter"]["fleet"]["clashes"] == 15
    assert candidate["by_reporter"]["squatter"] == {
        "n": 15, "pass_rate": 1.0, "forbidden_rate": 0.0, "clashes": 0, "counted": False}
    # Each reporter's trace of a clashed run id is kept and readable; the fleet sees its own.
    got = client.get("/v1/traces/eval-r-30", headers=auth(FLEET)).json
    assert got["trace"]["reporter"] == "fleet" and got["claimed_by"] == ["fleet", "squatter"]
    got = client.get("/v1/traces/eval-r-30?reporter=squatter", headers=auth(OPERATOR)).json
    assert got["trace"]["reporter"] == "squatter"
    # A retry is still a duplicate, for either reporter.
    again = client.post("/v1/traces", headers=auth(FLEET), json=_trace("eval-r-30", passing=False))
    assert again.json["results"][0]["status"] == "duplicate"
    again = client.post("/v1/traces", headers=auth(SQUATTER),
                        json=_trace("eval-r-30", passing=True))
    assert again.json["results"][0]["status"] == "duplicate"

    with werkzeug_server(trusted_app) as url:
        api = ApiClient(url, GATEKEEPER, attempts=2)
        try:
            [decision] = tick(api, time.time())
            # The squatters changed nothing that counts: the pass rate 0.625 holds (it is under
            # min_pass_rate, which holds promotion) or the tests roll it back; never advance.
            assert decision.action in (Action.ROLLBACK, Action.HOLD), decision
            assert "0.625" in decision.reason or decision.action is Action.ROLLBACK, decision
            assert api.get("/v1/bindings/r")["binding"]["stage"] in ("canary", "rolled_back")
        finally:
            api.close()


def test_the_fleet_first_then_the_squatter_changes_nothing_counted(trusted_app: Flask) -> None:
    """Squatting after the fleet reported: the fleet's counts stand, the squatter's clash shows."""
    client = trusted_app.test_client()
    assert client.post("/v1/traces", headers=auth(FLEET),
                       json={"traces": _fleet_runs()}).status_code == 200
    _squat(trusted_app)
    candidate = client.get("/v1/roles/r/gate", headers=auth(OPERATOR)).json["arms"]["candidate"]
    assert (candidate["n"], candidate["pass_rate"], candidate["clashes"]) == (40, 0.625, 15)
    assert candidate["by_reporter"]["squatter"]["clashes"] == 15


def test_without_trusted_reporters_a_clash_raises_no_pass_rate(redis_url: str) -> None:
    """Every reporter counts: squatted ids count exactly as fresh ids would, the fleet's too."""
    rates = []
    for squat_ids in ("eval-r-{i}", "fresh-{i}"):
        app = _app(redis_url, None)
        client = app.test_client()
        squat = [_trace(squat_ids.format(i=i), passing=True) for i in FAILING]
        assert client.post("/v1/traces", headers=auth(SQUATTER),
                           json={"traces": squat}).status_code == 200
        assert client.post("/v1/traces", headers=auth(FLEET),
                           json={"traces": _fleet_runs()}).status_code == 200
        candidate = client.get("/v1/roles/r/gate", headers=auth(OPERATOR)).json["arms"][
            "candidate"]
        rates.append((candidate["n"], candidate["pass_rate"], candidate["clashes"]))
        app.extensions["rolegate"].redis.flushdb()
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
    assert rates == [(55, 40 / 55, 15), (55, 40 / 55, 0)]


def test_the_store_keeps_each_reporters_run_under_one_run_id(redis_conn: Any) -> None:
    """Two reporters, one run id: both stored and counted as their own, the second a clash."""
    store = TraceStore(redis_conn)
    invariants = Invariants()

    def item(reporter: str) -> Checked:
        trace = Trace.model_validate({**_trace("x1", passing=True), "reporter": reporter})
        return Checked(trace, check(trace, invariants), "0")

    [first] = store.add([item("a")])
    [second] = store.add([item("b")])
    [retry] = store.add([item("b")])
    assert (first.duplicate, first.clash) == (False, ())
    assert (second.duplicate, second.clash) == (False, ("a",))
    assert retry.duplicate and retry.location == second.location
    assert sorted(store.claims("r", "x1")) == ["a", "b"]
    by = store.windows_by_reporter("r", [("cfg_b", "candidate")], "0")[0]
    assert (by["a"].n, by["a"].clashes, by["b"].n, by["b"].clashes) == (1, 0, 1, 1)
    assert store.window("r", "cfg_b", "candidate", "0").clashes == 1
