"""Which stage and arm a posted trace counts in: the binding in Redis, not a worker's copy."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from router import create_app
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.test_api_traces import make_role, post, trace


@pytest.fixture
def frozen(redis_url: str) -> Iterator[Flask]:
    """A second router on the same Redis whose copy of the bindings never refreshes.

    It is a gunicorn worker inside its 0.2 s refresh interval, held there for as
    long as the test needs.
    """
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 1.0})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def _freeze(app: Flask) -> FlaskClient:
    """Load the app's copy of the bindings now, then stop it refreshing."""
    client = app.test_client()
    assert client.get("/v1/resolve/summarizer?key=k", headers=auth(CALLER)).status_code == 200
    app.extensions["rolegate"].cache.stop()
    return client


def _copy_version(app: Flask) -> int:
    """The version of summarizer's binding in the app's own copy."""
    record = app.extensions["rolegate"].cache.get("summarizer")[0]
    assert record is not None
    return int(record.version)


def _stage_since(client: FlaskClient) -> float:
    """The stage_since of summarizer's binding as the store holds it."""
    r = client.get("/v1/bindings/summarizer", headers=auth(CALLER))
    return float(r.json["binding"]["stage_since"])


def _gate(client: FlaskClient) -> Any:
    r = client.get("/v1/roles/summarizer/gate", headers=auth(CALLER))
    assert r.status_code == 200, r.json
    return r.json


def test_traces_posted_right_after_a_stage_change_count_in_the_new_stage(
        client: FlaskClient, frozen: Flask) -> None:
    """A worker whose copy predates the promotion still counts new traces in the new stage."""
    make_role(client, share=0.1)
    stale = _freeze(frozen)
    r = client.post("/v1/bindings/summarizer/promote", json={"reason": "next step"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200 and r.json["binding"]["share"] == 0.5, r.json
    assert _copy_version(frozen) == 2  # the stale worker still sees the first canary step
    r = post(stale, {"traces": [trace(f"c{i}", arm="candidate") for i in range(50)]})
    assert r.status_code == 200 and r.json["accepted"] == 50, r.json
    gate = _gate(client)
    assert gate["window"]["since"] == pytest.approx(_stage_since(client))
    assert gate["arms"]["candidate"]["n"] == 50
    assert _copy_version(frozen) == 3  # and its copy caught up on the way


def test_a_candidate_set_a_moment_ago_is_accepted_by_a_stale_worker(
        client: FlaskClient, frozen: Flask) -> None:
    """A trace naming a config the worker's copy does not know yet is checked against Redis."""
    r = client.put("/v1/bindings/summarizer", json={"current": "cfg_a"}, headers=auth(OPERATOR))
    assert r.status_code == 201, r.json
    stale = _freeze(frozen)
    r = client.put("/v1/bindings/summarizer", json={"current": "cfg_a", "candidate": "cfg_b",
                                                   "stage": "shadow"},
                   headers={**auth(OPERATOR), "If-Match": "1"})
    assert r.status_code == 200, r.json
    r = post(stale, trace("s1", arm="shadow"))
    assert r.status_code == 200 and r.json["accepted"] == 1, r.json
    assert _gate(client)["arms"]["shadow"]["n"] == 1


def test_a_trace_of_a_config_neither_arm_runs_is_refused_with_the_reason(
        client: FlaskClient) -> None:
    """Per trace: config_not_bound names the role's arms; the rest of the batch is stored (207)."""
    make_role(client, share=0.1)
    r = post(client, {"traces": [trace("ok", arm="current"),
                                 trace("stray", arm="candidate", config="cfg_z")]})
    assert r.status_code == 207, r.json
    assert r.json["accepted"] == 1 and r.json["refused"] == 1
    refused = next(x for x in r.json["results"] if x["status"] == "refused")
    assert refused["index"] == 1 and refused["run_id"] == "stray"
    error = refused["error"]
    assert error["code"] == "config_not_bound"
    assert "'cfg_z'" in error["message"] and "'cfg_a'" in error["message"] \
        and "'cfg_b'" in error["message"]
    assert error["details"] == {"field": "config", "config": "cfg_z", "current": "cfg_a",
                                "candidate": "cfg_b", "version": 2}
    alone = post(client, trace("stray2", config="cfg_z"))
    assert alone.status_code == 422 and alone.json["error"]["code"] == "config_not_bound"
    assert _gate(client)["arms"]["current"]["n"] == 1


def test_a_late_trace_of_the_replaced_config_is_refused_after_promotion(
        client: FlaskClient) -> None:
    """Once the candidate is stable, a trace of the old current config counts nowhere: refused."""
    r = client.put("/v1/bindings/summarizer", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "candidate": "cfg_b", "stage": "full", "share": 1.0})
    assert r.status_code == 201, r.json
    r = client.post("/v1/bindings/summarizer/promote", json={"reason": "bake done"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200 and r.json["binding"]["current"] == "cfg_b", r.json
    r = post(client, trace("late", arm="current", config="cfg_a"))
    assert r.status_code == 422, r.json
    assert "has no candidate" in r.json["results"][0]["error"]["message"]
