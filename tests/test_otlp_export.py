"""Traces out (issue 37): every stored run reaches a real loopback OTLP collector as a span, once.

The collector (tests/otlp_collector.py) decodes each ExportTraceServiceRequest
with the opentelemetry-proto classes. Runs go in through POST /v1/traces, the
real ingest path; the exporter reads them from Redis.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
import requests
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from bindings.connection import RedisTarget, connect
from gatekeeper.export.exporter import OtlpExporter
from gatekeeper.export.otlp_send import OtlpSender, classify, parse_headers, traces_url
from gatekeeper.store.export_cursor import ExportCursors
from router import create_app
from router.cli import main
from router.server.settings import load_settings
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.otlp_collector import attributes, collector
from tests.servers import base_env, gunicorn, wait_for

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
GATE = {"thresholds": {"min_samples": 5, "min_pass_rate": 0.8},
        "invariants": {"forbidden_tools": ["web_write"], "max_steps": 4}}


def run(run_id: str, arm: str, *, forbidden: bool = False, long: bool = False,
        role: str = "summarizer") -> dict[str, Any]:
    """A trace body; `forbidden` calls the forbidden tool, `long` takes too many steps."""
    return {"run_id": run_id, "role": role, "arm": arm,
            "config": "cfg_a" if arm == "current" else "cfg_b", "key": f"job-{run_id}",
            "tools": ["read", "web_write"] if forbidden else ["read"],
            "step_count": 6 if long else 2, "cost_usd": 0.01, "latency_s": 1.5, "stamps": STAMPS}


def post(client: FlaskClient, traces: list[dict[str, Any]]) -> None:
    """Store `traces` through POST /v1/traces, all accepted."""
    for start in range(0, len(traces), 500):
        r = client.post("/v1/traces", json={"traces": traces[start:start + 500]},
                        headers=auth(CALLER))
        assert r.status_code == 200 and r.json["accepted"] == len(traces[start:start + 500]), \
            r.json


def make_role(client: FlaskClient, role: str = "summarizer", **extra: Any) -> None:
    """Create `role` on cfg_a with candidate cfg_b (stage stable)."""
    r = client.put(f"/v1/bindings/{role}", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "candidate": "cfg_b", "gate": GATE, **extra})
    assert r.status_code == 201, r.json


def canary(client: FlaskClient, share: float) -> None:
    """Put summarizer's candidate on a canary of `share`."""
    r = client.post("/v1/bindings/summarizer/canary", headers=auth(OPERATOR),
                    json={"share": share, "reason": "start canary"})
    assert r.status_code == 200, r.json


@pytest.fixture
def exporting(redis_url: str) -> Iterator[Flask]:
    """A router that exports (its /metrics shows the export), on the test database."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05,
                      "export_otlp_endpoint": "http://127.0.0.1:9/v1/traces"})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


@contextmanager
def exporter(redis_url: str, url: str, **options: Any) -> Iterator[OtlpExporter]:
    """An exporter to `url` looping in a thread, stopped (lease released) afterwards."""
    connection = connect(RedisTarget(url=redis_url))
    sender = OtlpSender(url, timeout_s=options.pop("timeout_s", 10.0))
    keeper = OtlpExporter(connection, sender, interval_s=0.05, **options)
    thread = threading.Thread(target=keeper.run, daemon=True)
    thread.start()
    try:
        yield keeper
    finally:
        keeper.stop.set()
        thread.join(30)
        sender.close()
        connection.close()


def by_run(spans: list[Span]) -> dict[str, dict[str, Any]]:
    """Each span's attributes by run id; fails on a run seen twice."""
    seen = Counter(attributes(s.attributes)["rolegate.run_id"] for s in spans)
    twice = [run_id for run_id, n in seen.items() if n > 1]
    assert not twice, f"runs exported more than once: {twice[:5]}"
    return {attributes(s.attributes)["rolegate.run_id"]: attributes(s.attributes) for s in spans}


def metric(text: str, name: str, labels: str = "") -> float:
    """One sample of a Prometheus text exposition."""
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{wanted} not in the scrape:\n{text}")


def test_every_stored_run_arrives_once_with_its_placement_stage_and_verdict(
        client: FlaskClient, exporting: Flask, redis_url: str) -> None:
    """Runs stored at three stages, passing and failing, arrive once each, as rolegate judged
    them: placement, the stage they arrived in, verdict and failed invariants."""
    make_role(client)
    stable = [run(f"s-{i}", "current") for i in range(40)]
    post(client, stable)
    canary(client, 0.5)
    hex_ids = [f"{i:032x}" for i in range(1, 31)]
    live = ([run(f"c-{i}", "current", forbidden=i % 9 == 0, long=i % 9 == 0) for i in range(400)]
            + [run(f"k-{i}", "candidate", long=i % 7 == 0) for i in range(400)]
            + [run(h, "candidate") for h in hex_ids])
    post(client, live)
    # The candidate calls the forbidden tool: the tripwire rolls the role back.
    trip = [{**run("trip", "candidate", forbidden=True), "steps": [
        {"tool": "read", "args": {"path": "secret.txt"}, "latency_s": 0.5},
        {"tool": "web_write", "args": {"body": "secret"}, "error": "refused", "offered": False}]}]
    post(client, trip)
    after = [run(f"a-{i}", "current") for i in range(29)]
    post(client, after)
    stages = {"s": "stable", "c": "canary", "k": "canary", "0": "canary", "t": "canary",
              "a": "rolled_back"}
    live += trip + after
    scrape = exporting.test_client().get("/metrics").text
    assert metric(scrape, "rolegate_otlp_export_lag_runs", 'role="summarizer"') == 900
    assert metric(scrape, "rolegate_otlp_export_lag_seconds", 'role="summarizer"') >= 0
    assert metric(scrape, "rolegate_otlp_export_up") == 0

    with collector() as got, exporter(redis_url, got.url, batch=128) as keeper:
        wait_for(lambda: got.count() >= 900, 60, "900 spans at the collector")
        scrape = exporting.test_client().get("/metrics").text
        assert metric(scrape, "rolegate_otlp_export_up") == 1
        keeper.stop.set()
    spans = by_run(got.spans)
    assert set(spans) == {t["run_id"] for t in stable + live}
    assert got.resources[0]["service.name"] == "rolegate"
    for body in stable + live:
        attrs = spans[body["run_id"]]
        forbidden, long = "web_write" in body["tools"], body["step_count"] > 4
        assert (attrs["rolegate.role"], attrs["rolegate.config"], attrs["rolegate.arm"]) == \
            ("summarizer", body["config"], body["arm"])
        assert attrs["rolegate.stage"] == stages[body["run_id"][0]], body["run_id"]
        assert attrs["rolegate.verdict"] == ("fail" if forbidden or long else "pass")
        assert attrs["rolegate.failed_invariants"] == (
            ["forbidden_tools"] if forbidden else []) + (["max_steps"] if long else [])
        assert attrs.get("rolegate.forbidden_tools") == (["web_write"] if forbidden else None)
    failed = next(s for s in got.spans if attributes(s.attributes)["rolegate.run_id"] == "k-0")
    assert failed.status.code == Status.STATUS_CODE_ERROR
    assert failed.end_time_unix_nano - failed.start_time_unix_nano == 1_500_000_000
    # A run that came in over OTLP (its run id a trace id) joins the team's own trace.
    joined = next(s for s in got.spans if attributes(s.attributes)["rolegate.run_id"] == hex_ids[4])
    assert joined.trace_id.hex() == hex_ids[4]
    # The trip's steps are events: each call, in order, the forbidden one marked; never its args.
    tripped = next(s for s in got.spans if attributes(s.attributes)["rolegate.run_id"] == "trip")
    events = [(e.name, attributes(e.attributes)) for e in tripped.events]
    assert events == [
        ("rolegate.step", {"gen_ai.tool.name": "read", "rolegate.step.index": 0,
                           "rolegate.step.failed": False, "rolegate.step.latency_s": 0.5}),
        ("rolegate.step", {"gen_ai.tool.name": "web_write", "rolegate.step.index": 1,
                           "rolegate.step.failed": True, "rolegate.step.forbidden": True,
                           "rolegate.step.offered": False})]
    assert tripped.events[0].time_unix_nano == tripped.start_time_unix_nano
    assert tripped.events[1].time_unix_nano == tripped.start_time_unix_nano + 500_000_000

    # Nothing is sent again: a fresh exporter finds nothing waiting.
    with exporter(redis_url, got.url) as again:
        assert again.lead() and again.once() == 0
    assert got.count() == 900
    scrape = exporting.test_client().get("/metrics").text
    assert metric(scrape, "rolegate_otlp_export_lag_runs", 'role="summarizer"') == 0
    assert metric(scrape, "rolegate_otlp_export_lag_seconds", 'role="summarizer"') == 0
    assert metric(scrape, "rolegate_otlp_export_spans_total") == 900


def test_a_collector_answering_503_and_429_gets_every_run_once_when_it_recovers(
        client: FlaskClient, exporting: Flask, redis_url: str) -> None:
    """503, 429 (Retry-After) and 502 are tried again; the runs arrive once, the retries counted."""
    make_role(client)
    bodies = [run(f"r-{i}", "current") for i in range(120)]
    post(client, bodies)
    with collector() as got:
        got.script = [(503, {"Retry-After": "0"}), (429, {"Retry-After": "0"}), (502, {})]
        with exporter(redis_url, got.url, batch=50):
            wait_for(lambda: got.count() >= 120, 60, "120 spans after the collector recovered")
    assert set(by_run(got.spans)) == {b["run_id"] for b in bodies}
    assert got.requests >= 3 + 3
    scrape = exporting.test_client().get("/metrics").text
    assert metric(scrape, "rolegate_otlp_export_retries_total") == 3
    assert metric(scrape, "rolegate_otlp_export_lag_runs", 'role="summarizer"') == 0


def test_a_restarted_exporter_resumes_where_the_last_one_stopped(
        client: FlaskClient, redis_url: str) -> None:
    """Stopped part-way, the next exporter sends only what the first had not: each run once."""
    make_role(client)
    bodies = [run(f"r-{i}", "current") for i in range(300)]
    post(client, bodies)
    with collector() as got:
        with exporter(redis_url, got.url, batch=20):
            wait_for(lambda: got.count() >= 60, 30, "the first exporter's first batches")
        # Stored while no exporter runs: the next one must send these and only these.
        later = [run(f"later-{i}", "current") for i in range(100)]
        post(client, later)
        bodies += later
        with exporter(redis_url, got.url, batch=100):
            wait_for(lambda: got.count() >= 400, 30, "the rest, from the second exporter")
    assert set(by_run(got.spans)) == {b["run_id"] for b in bodies}


def test_one_exporter_leads_while_two_run(client: FlaskClient, redis_url: str) -> None:
    """Two exporters on one Redis (two routers): one holds the lease; no run goes out twice."""
    make_role(client)
    bodies = [run(f"r-{i}", "current") for i in range(400)]
    post(client, bodies)
    with collector() as got, exporter(redis_url, got.url, batch=25), \
            exporter(redis_url, got.url, batch=25):
        wait_for(lambda: got.count() >= 400, 60, "400 spans")
    assert set(by_run(got.spans)) == {b["run_id"] for b in bodies}


def test_trimmed_and_refused_runs_are_counted_as_drops(
        client: FlaskClient, exporting: Flask, redis_url: str) -> None:
    """Runs trimmed past the retention unexported, and a run the collector refuses (400), are
    dropped and counted by reason; every other run arrives."""
    make_role(client, trace_retention=50)
    post(client, [run(f"old-{i}", "current") for i in range(400)])
    stream = ("summarizer", "cfg_a", "current")
    kept = exporting.extensions["rolegate.traces"].length(*stream)
    assert kept < 400
    post(client, [run(f"new-{i}", "candidate") for i in range(30)] + [run("poison", "candidate")])

    def refuse(request: Any) -> int | None:
        ids = {attributes(s.attributes)["rolegate.run_id"]
               for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
        return 400 if "poison" in ids else None

    with collector() as got:
        got.refuse = refuse
        with exporter(redis_url, got.url, batch=64):
            wait_for(lambda: got.count() >= kept + 30, 30, "every run still stored but one")
            wait_for(lambda: ExportCursors(exporting.extensions["rolegate"].redis).totals()
                     .get("dropped:rejected") == "1", 30, "the refused run counted")
    spans = by_run(got.spans)
    assert "poison" not in spans and {f"new-{i}" for i in range(30)} <= set(spans)
    assert sum(1 for r in spans if r.startswith("old-")) == kept
    scrape = exporting.test_client().get("/metrics").text
    assert metric(scrape, "rolegate_otlp_export_dropped_total", 'reason="trimmed"') == 400 - kept
    assert metric(scrape, "rolegate_otlp_export_dropped_total", 'reason="rejected"') == 1
    assert metric(scrape, "rolegate_otlp_export_lag_runs", 'role="summarizer"') == 0


def exporter_pids() -> set[int]:
    """`rolegate export-otlp` processes whose parent (a gunicorn master) this test started."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if b"export-otlp" not in cmdline.read():
                    continue
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{parent}/stat") as stat:
                grandparent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if grandparent == os.getpid():
            found.add(int(entry))
    return found


def test_ingest_answers_while_the_collector_hangs(redis_url: str, redis_conn: redis.Redis) -> None:
    """`rolegate serve`'s master runs the exporter beside a real gunicorn router: with the
    collector hung, POST /v1/traces answers as ever and the lag shows in /metrics; an exporter
    killed outright is restarted and resumes; once the collector recovers every run arrives
    once."""
    with collector() as got:
        got.flowing.clear()
        env = base_env(REDIS_URL=redis_url, ROLEGATE_TOKENS=TOKENS,
                       ROLEGATE_EXPORT_OTLP_ENDPOINT=got.url)
        with gunicorn(env, workers=1) as url:
            r = requests.put(f"{url}/v1/bindings/summarizer", headers=auth(OPERATOR),
                             json={"current": "cfg_a", "candidate": "cfg_b", "gate": GATE},
                             timeout=5)
            assert r.status_code == 201, r.text
            sent = []
            for batch in range(10):
                bodies = [run(f"h-{batch}-{i}", "current") for i in range(50)]
                r = requests.post(f"{url}/v1/traces", json={"traces": bodies},
                                  headers=auth(CALLER), timeout=5)
                assert r.status_code == 200 and r.json()["accepted"] == 50, r.text
                sent += bodies
                if batch == 0:
                    wait_for(lambda: got.requests >= 1, 30, "the exporter stuck on the collector")
            assert not got.flowing.is_set() and got.count() == 0
            scrape = requests.get(f"{url}/metrics", timeout=5).text
            assert metric(scrape, "rolegate_otlp_export_lag_runs", 'role="summarizer"') >= 450
            assert metric(scrape, "rolegate_otlp_export_up") == 1
            (first,) = exporter_pids()
            os.kill(first, signal.SIGKILL)
            wait_for(lambda: exporter_pids() - {first}, 30, "the master to restart the exporter")
            got.flowing.set()
            wait_for(lambda: got.count() >= 500, 60, "every run once the collector recovered")
            assert set(by_run(got.spans)) == {b["run_id"] for b in sent}


def test_endpoint_and_headers_settings() -> None:
    """A base endpoint gets /v1/traces; a bad URL or header pair stops the boot naming it."""
    assert traces_url("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_url("https://x/api/public/otel/") == "https://x/api/public/otel/v1/traces"
    assert traces_url("http://c:4318/v1/traces") == "http://c:4318/v1/traces"
    assert parse_headers("Authorization=Basic%20abc, x-team = a") == \
        {"Authorization": "Basic abc", "x-team": "a"}
    for bad in ({"ROLEGATE_EXPORT_OTLP_ENDPOINT": "collector:4318"},
                {"ROLEGATE_EXPORT_OTLP_HEADERS": "Authorization"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            load_settings(environ=bad)
    assert classify(503, b"", "", 2.0).verdict == "retry"
    assert classify(401, b"", "", None).verdict == "retry"
    assert classify(400, b"", "", None).verdict == "reject"


def test_export_otlp_without_a_collector_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """`rolegate export-otlp` with no endpoint, or a bad one, exits 2 saying what is missing."""
    monkeypatch.delenv("ROLEGATE_EXPORT_OTLP_ENDPOINT", raising=False)
    runner = CliRunner()
    result = runner.invoke(main, ["export-otlp"])
    assert result.exit_code == 2 and "ROLEGATE_EXPORT_OTLP_ENDPOINT" in result.output
    result = runner.invoke(main, ["export-otlp", "--endpoint", "collector:4318"])
    assert result.exit_code == 2 and "must be an http(s) URL" in result.output


@pytest.mark.cluster
def test_export_from_a_redis_cluster(cluster_url: str) -> None:
    """On a three-master Redis Cluster (each role's keys in its own slot): every run of two roles
    arrives once, and the lag reads zero after."""
    from tests.cluster import close_client

    app = create_app({"redis_url": cluster_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05, "export_otlp_endpoint": "http://127.0.0.1:9"})
    try:
        client = app.test_client()
        roles = ("summarizer", "triage")
        bodies = []
        for role in roles:
            make_role(client, role)
            bodies += [run(f"{role}-{i}", "current", role=role) for i in range(150)]
        post(client, bodies)
        with collector() as got, exporter(cluster_url, got.url, batch=64):
            wait_for(lambda: got.count() >= 300, 60, "300 spans from the cluster")
        spans = by_run(got.spans)
        assert set(spans) == {b["run_id"] for b in bodies}
        assert {spans[f"triage-{i}"]["rolegate.role"] for i in range(150)} == {"triage"}
        scrape = app.test_client().get("/metrics").text
        for role in roles:
            assert metric(scrape, "rolegate_otlp_export_lag_runs", f'role="{role}"') == 0
        assert metric(scrape, "rolegate_otlp_export_spans_total") == 300
    finally:
        app.extensions["rolegate"].cache.stop()
        close_client(app.extensions["rolegate"].redis)
