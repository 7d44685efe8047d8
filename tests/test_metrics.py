"""Prometheus metrics: resolves by arm, rollbacks by actor, gauges, Redis errors, workers."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from router import create_app
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, TOKENS, auth
from tests.deadlines import scaled


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse an exposition into {(sample name, sorted labels): value}."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    """One sample's value, 0 when absent (a counter never bumped is not exported)."""
    return samples(text).get((name, tuple(sorted(labels.items()))), 0.0)


def _create(client: FlaskClient, role: str) -> None:
    r = client.put(f"/v1/bindings/{role}", json={"current": "cfg_a", "candidate": "cfg_b"},
                   headers=auth(OPERATOR))
    assert r.status_code == 201, r.json


def test_resolves_counted_by_role_and_arm(client: FlaskClient) -> None:
    """Each resolve bumps the counter of its role and the arm it was routed to."""
    _create(client, "m-resolve")
    client.post("/v1/bindings/m-resolve/canary", json={"share": 0.5, "reason": "go"},
                headers=auth(OPERATOR))
    before = client.get("/metrics").text
    arms = {"current": 0, "candidate": 0}
    for i in range(30):
        r = client.get(f"/v1/resolve/m-resolve?key=k{i}", headers=auth(CALLER))
        arms[r.json["arm"]] += 1
    after = client.get("/metrics").text
    for arm, n in arms.items():
        delta = (value(after, "rolegate_resolves_total", role="m-resolve", arm=arm)
                 - value(before, "rolegate_resolves_total", role="m-resolve", arm=arm))
        assert delta == n
    assert arms["current"] and arms["candidate"]


def test_rollbacks_counted_by_actor(client: FlaskClient) -> None:
    """A rollback by an operator counts as human, by the gatekeeper as gatekeeper."""
    _create(client, "m-rb")
    before = client.get("/metrics").text
    for token in (OPERATOR, GATEKEEPER):
        client.post("/v1/bindings/m-rb/canary", json={"share": 0.1, "reason": "go"},
                    headers=auth(OPERATOR))
        r = client.post("/v1/bindings/m-rb/rollback", json={"reason": "bad"}, headers=auth(token))
        assert r.status_code == 200, r.json
    client.post("/v1/bindings/m-rb/canary", json={"share": 0.1, "reason": "go"},
                headers=auth(OPERATOR))
    r = client.post("/v1/bindings/m-rb/rollback",
                    json={"reason": "forbidden tool", "details": {"tripwire": "run-9"}},
                    headers=auth(GATEKEEPER))
    after = client.get("/metrics").text
    for actor in ("human", "gatekeeper", "tripwire"):
        delta = (value(after, "rolegate_rollbacks_total", role="m-rb", actor=actor)
                 - value(before, "rolegate_rollbacks_total", role="m-rb", actor=actor))
        assert delta == 1, actor


def test_stage_and_share_gauges(client: FlaskClient) -> None:
    """The stage and share gauges show each role's binding."""
    _create(client, "m-gauge")
    r = client.post("/v1/bindings/m-gauge/canary", json={"share": 0.25, "reason": "go"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200
    text = client.get("/metrics").text
    assert value(text, "rolegate_share", role="m-gauge") == 0.25
    assert value(text, "rolegate_stage", role="m-gauge", stage="canary") == 1.0
    assert value(text, "rolegate_stage", role="m-gauge", stage="stable") == 0.0
    assert value(text, "rolegate_bindings_stale") == 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_redis_errors_counted() -> None:
    """A request that finds Redis down answers 503 and bumps the Redis error counter."""
    app = create_app({"redis_url": f"redis://127.0.0.1:{_free_port()}/0", "tokens": TOKENS,
                      "testing": True, "refresh_interval_s": 0.05})
    try:
        client = app.test_client()
        before = client.get("/metrics").text
        r = client.get("/v1/bindings/anything", headers=auth(OPERATOR))
        assert r.status_code == 503
        after = client.get("/metrics").text
        assert (value(after, "rolegate_redis_errors_total", where="request")
                - value(before, "rolegate_redis_errors_total", where="request")) == 1
        assert value(after, "rolegate_redis_errors_total", where="refresh") >= 1
        assert value(after, "rolegate_bindings_stale") == 1.0
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


GUNICORN_CONF = Path(__file__).resolve().parent.parent / "deploy" / "gunicorn.conf.py"


@pytest.fixture
def gunicorn_router(redis_url: str, tmp_path: Path) -> Iterator[str]:
    """Two workers under the deploy gunicorn config, which sets up multiprocess metrics."""
    port = _free_port()
    stale = tmp_path / "prometheus"
    stale.mkdir()
    # A leftover from an earlier run: on_starting must clear it, not add it up.
    (stale / "counter_99999.db").write_bytes(b"\0" * 16)
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update({"REDIS_URL": redis_url, "ROLEGATE_TOKENS": TOKENS,
                "ROLEGATE_DATA_DIR": str(tmp_path), "ROLEGATE_REFRESH_INTERVAL": "0.05",
                "ROLEGATE_WORKERS": "2", "ROLEGATE_BIND": f"127.0.0.1:{port}",
                # Sync workers take one request at a time, so concurrent requests
                # must spread over both (gthread may let one worker take them all).
                "ROLEGATE_WORKER_CLASS": "sync"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(GUNICORN_CONF), "router:create_app()"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + scaled(30)
        while True:
            try:
                requests.get(f"{url}/healthz", timeout=2).close()
                break
            except (requests.ConnectionError, requests.Timeout):
                # Refused until the master listens; slow while a worker still boots.
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError("gunicorn did not come up") from None
                time.sleep(0.05)
        assert not (stale / "counter_99999.db").exists(), "on_starting left old metrics"
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_counters_sum_over_gunicorn_workers(gunicorn_router: str) -> None:
    """Under two gunicorn workers every scrape shows the resolves all workers served."""
    url = gunicorn_router
    with requests.Session() as admin:
        r = admin.put(f"{url}/v1/bindings/m-workers", json={"current": "a", "candidate": "b"},
                      headers=auth(OPERATOR), timeout=5)
        assert r.status_code == 201, r.text
    deadline = time.monotonic() + scaled(5)

    def one(i: int) -> str | None:
        while True:
            r = requests.get(f"{url}/v1/resolve/m-workers?key=k{i}", headers=auth(CALLER),
                             timeout=5)
            # A 404 (not counted) while this worker's copy has yet to see the new role.
            if r.status_code != 404 or time.monotonic() > deadline:
                break
        assert r.status_code == 200, r.text
        return r.headers.get("X-Rolegate-Worker")

    workers: set[str | None] = set()
    total = 0
    until = time.monotonic() + scaled(15)
    with ThreadPoolExecutor(4) as pool:
        # The second worker may still be booting when the first answers: keep
        # sending concurrent batches until both have served (or time is up).
        while len(workers) < 2 and time.monotonic() < until:
            workers |= set(pool.map(one, range(total, total + 40)))
            total += 40
    for _ in range(6):
        text = requests.get(f"{url}/metrics", timeout=5).text
        assert value(text, "rolegate_resolves_total", role="m-workers", arm="current") == total
    assert len(workers) == 2, "both workers should have served"


STAMPS = {"agent_version": "1", "instruction_hash": "i", "model_id": "m", "tool_schema_hash": "t"}


def _trace(run_id: str, arm: str, tools: list[str]) -> dict[str, object]:
    return {"run_id": run_id, "role": "m-tr", "arm": arm,
            "config": "cfg_a" if arm == "current" else "cfg_b", "key": run_id,
            "tools": tools, "stamps": STAMPS}


def test_traces_tripwire_and_verdicts_counted(client: FlaskClient) -> None:
    """Ingested traces count by arm (duplicates not), a tripwire rollback counts, so do verdicts."""
    r = client.put("/v1/bindings/m-tr", headers=auth(OPERATOR), json={
        "current": "cfg_a", "candidate": "cfg_b",
        "gate": {"invariants": {"forbidden_tools": ["rm_rf"]}}})
    assert r.status_code == 201
    client.post("/v1/bindings/m-tr/canary", json={"share": 0.5, "reason": "go"},
                headers=auth(OPERATOR))
    before = client.get("/metrics").text
    batch = [_trace("c1", "current", ["read"]), _trace("c2", "current", ["read"]),
             _trace("k1", "candidate", ["read"])]
    assert client.post("/v1/traces", json={"traces": batch}, headers=auth(CALLER)).status_code == 200
    client.post("/v1/traces", json=batch[0], headers=auth(CALLER))  # a duplicate
    r = client.post("/v1/traces", json=_trace("k2", "candidate", ["rm_rf"]), headers=auth(CALLER))
    assert r.json["tripwire"], r.json
    assert client.get("/v1/roles/m-tr/gate", headers=auth(CALLER)).status_code == 200
    after = client.get("/metrics").text

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("rolegate_traces_ingested_total", role="m-tr", arm="current") == 2
    assert delta("rolegate_traces_ingested_total", role="m-tr", arm="candidate") == 2
    assert delta("rolegate_rollbacks_total", role="m-tr", actor="tripwire") == 1
    gate = sum(v for (name, labels), v in samples(after).items()
               if name == "rolegate_verdicts_total" and ("source", "gate") in labels)
    assert gate >= 1


def test_every_metric_is_documented(client: FlaskClient) -> None:
    """docs/operations.md names every metric family /metrics exports."""
    _create(client, "m-doc")
    text = client.get("/metrics").text
    doc = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    typed = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE)
    names = {name + "_total" if kind == "counter" and not name.endswith("_total") else name
             for name, kind in typed if not name.endswith("_created")}
    assert {"rolegate_resolves_total", "rolegate_stage", "rolegate_share"} <= names
    for name in names:
        assert f"`{name}`" in doc, name
