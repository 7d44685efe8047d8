"""POST /v1/traces with OTLP bodies (JSON and protobuf), against the real Redis."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from gatekeeper.store.pending_spans import PendingSpans, spans_key
from rolegate.spans import Span
from router import create_app
from router.api.traces import trace_store
from tests.conftest import CALLER, OPERATOR, TOKENS, auth

TRACE_ID = "5b8efff798038103d269b633813fc60c"
GATE = {"thresholds": {"min_samples": 5}, "invariants": {"forbidden_tools": ["delete_account"]}}
PLACED = {"rolegate.role": "support", "rolegate.config": "cfg_b", "rolegate.arm": "candidate",
          "rolegate.key": "job-9"}


def make_role(client: FlaskClient, share: float = 0.5) -> None:
    """Create role support (cfg_a, candidate cfg_b forbidding delete_account) on a canary."""
    r = client.put("/v1/bindings/support", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "candidate": "cfg_b", "gate": GATE})
    assert r.status_code == 201, r.json
    r = client.post("/v1/bindings/support/canary", headers=auth(OPERATOR),
                    json={"share": share, "reason": "start canary"})
    assert r.status_code == 200, r.json


def value(v: Any) -> dict[str, Any]:
    """An OTLP JSON AnyValue."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    return {"stringValue": str(v)}


def json_span(span_id: str, parent: str, name: str, start: int, end: int,
              error: bool = False, **attributes: Any) -> dict[str, Any]:
    """One span in OTLP JSON; times in ms."""
    return {"traceId": TRACE_ID, "spanId": span_id.rjust(16, "0"),
            "parentSpanId": parent.rjust(16, "0") if parent else "", "name": name,
            "startTimeUnixNano": str(start * 1_000_000), "endTimeUnixNano": str(end * 1_000_000),
            "attributes": [{"key": k, "value": value(v)} for k, v in attributes.items()],
            "status": {"code": 2, "message": "boom"} if error else {}}


def export(*spans: dict[str, Any], resource: dict[str, Any] | None = None) -> dict[str, Any]:
    """An OTLP JSON export body holding `spans` under one resource."""
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": k, "value": value(v)}
                                    for k, v in (resource or {}).items()]},
        "scopeSpans": [{"scope": {"name": "test"}, "spans": list(spans)}]}]}


def post(client: FlaskClient, body: Any) -> Any:
    """POST an OTLP JSON body to /v1/traces."""
    return client.post("/v1/traces", data=json.dumps(body), headers=auth(CALLER),
                       content_type="application/json")


def tool(span_id: str, name: str, start: int, **more: Any) -> dict[str, Any]:
    """An execute_tool span under the root span 1."""
    return json_span(span_id, "1", f"execute_tool {name}", start, start + 2,
                     **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name},
                     **more)


def root(**attributes: Any) -> dict[str, Any]:
    """The run's root invoke_agent span."""
    return json_span("1", "", "invoke_agent triage", 0, 50, **{
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage", **attributes})


def test_spans_across_batches_make_one_run_when_the_root_ends(app: Flask,
                                                               client: FlaskClient) -> None:
    """Tool spans wait in Redis; the batch with the root completes, stores and counts the run."""
    make_role(client)
    first = post(client, export(tool("2", "search", 1), resource={"service.name": "agent"}))
    assert first.status_code == 200 and first.json == {}
    assert trace_store(app).length("support", "cfg_b", "candidate") == 0
    second = post(client, export(tool("3", "lookup", 5, error=True), root(**PLACED)))
    assert second.status_code == 200 and second.json == {}
    stored = trace_store(app).lookup("support", TRACE_ID).trace
    assert stored.tools == ("search", "lookup") and stored.tool_errors == 1
    assert stored.key == "job-9" and stored.steps and stored.steps[0].agent == "triage"
    gate = client.get("/v1/roles/support/gate", headers=auth(CALLER)).json
    assert gate["arms"]["candidate"]["n"] == 1
    again = post(client, export(tool("3", "lookup", 5, error=True), root(**PLACED)))
    assert again.status_code == 200
    assert client.get("/v1/roles/support/gate", headers=auth(CALLER)).json[
        "arms"]["candidate"]["n"] == 1  # a retried export is not counted twice


def test_a_forbidden_tool_span_trips_the_wire_when_it_arrives(client: FlaskClient) -> None:
    """An execute_tool span naming its candidate run rolls the role back before the run ends."""
    make_role(client)
    r = post(client, export(tool("2", "delete_account", 1, **PLACED)))
    assert r.status_code == 200, r.json
    binding = client.get("/v1/bindings/support", headers=auth(CALLER)).json["binding"]
    assert binding["stage"] == "rolled_back"
    history = client.get("/v1/bindings/support/history", headers=auth(CALLER)).json
    assert history["entries"][0]["actor"] == "tripwire"
    assert TRACE_ID in history["entries"][0]["reason"]


def test_a_run_that_cannot_be_placed_is_a_partial_success(client: FlaskClient) -> None:
    """A root naming no role, or an unknown role, refuses its spans with the reason."""
    make_role(client)
    r = post(client, export(tool("2", "search", 1), root()))
    assert r.status_code == 200
    assert r.json["partialSuccess"]["rejectedSpans"] == "2"
    assert "rolegate.role" in r.json["partialSuccess"]["errorMessage"]
    r = post(client, export(root(**{**PLACED, "rolegate.role": "nobody"})))
    assert r.json["partialSuccess"]["rejectedSpans"] == "1"
    assert "nobody" in r.json["partialSuccess"]["errorMessage"]


def test_protobuf_gzip_export_is_answered_in_protobuf(app: Flask, client: FlaskClient) -> None:
    """A gzipped protobuf ExportTraceServiceRequest is decoded; the answer is protobuf too."""
    make_role(client)
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    for key, text in PLACED.items():
        attribute = resource_spans.resource.attributes.add()
        attribute.key, attribute.value.string_value = key, text
    span = resource_spans.scope_spans.add().spans.add()
    span.trace_id, span.span_id = bytes.fromhex(TRACE_ID), bytes.fromhex("00000000000000aa")
    span.name, span.start_time_unix_nano, span.end_time_unix_nano = "invoke_agent a", 1, 2
    r = client.post("/v1/traces", data=gzip.compress(request.SerializeToString()),
                    headers={**auth(CALLER), "Content-Encoding": "gzip"},
                    content_type="application/x-protobuf")
    assert r.status_code == 200 and r.mimetype == "application/x-protobuf"
    answer = ExportTraceServiceResponse.FromString(r.data)
    assert answer.partial_success.rejected_spans == 0
    assert trace_store(app).lookup("support", TRACE_ID).trace.arm == "candidate"


def test_a_body_that_is_not_otlp_is_a_400_naming_where(client: FlaskClient) -> None:
    """A bad id, a wrong type, a broken protobuf or gzip stream: 400 saying what and where."""
    bad = export(tool("2", "search", 1))
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "xyz"
    r = post(client, bad)
    assert r.status_code == 400
    assert "resourceSpans[0].scopeSpans[0].spans[0].traceId" in r.json["error"]["message"]
    r = post(client, {"resourceSpans": {"not": "a list"}})
    assert r.status_code == 400 and "resourceSpans" in r.json["error"]["message"]


def test_a_refused_protobuf_export_is_answered_with_a_protobuf_status(
        client: FlaskClient) -> None:
    """OTLP/HTTP: a 4xx to a protobuf export carries a google.rpc.Status, not JSON."""
    r = client.post("/v1/traces", data=b"\xff\xff\xff", headers=auth(CALLER),
                    content_type="application/x-protobuf")
    assert r.status_code == 400 and r.mimetype == "application/x-protobuf"
    status = Status.FromString(r.data)
    assert status.code == 3 and "protobuf" in status.message  # INVALID_ARGUMENT
    r = client.post("/v1/traces", data=b"not gzip", content_type="application/x-protobuf",
                    headers={**auth(CALLER), "Content-Encoding": "gzip"})
    assert r.status_code == 400 and "gzip" in Status.FromString(r.data).message
    r = client.post("/v1/traces", data=b"", content_type="application/x-protobuf")
    assert r.status_code == 401  # no token
    assert Status.FromString(r.data).code == 16  # UNAUTHENTICATED
    # Other paths and JSON exports keep rolegate's JSON error shape.
    r = client.post("/v1/traces", data=b"{", headers=auth(CALLER),
                    content_type="application/json")
    assert r.status_code == 400 and "error" in r.json


def test_pending_spans_are_bounded_and_expire(redis_conn: Any) -> None:
    """Past max_spans a run's spans are refused, past max_runs a new run; each run expires."""
    pending = PendingSpans(redis_conn, ttl=60, max_spans=2, max_runs=1)

    def spans(trace: str, *ids: str) -> list[Span]:
        return [Span(trace, i.rjust(16, "0"), "1".rjust(16, "0"), "x", 0, 1) for i in ids]

    assert pending.add("a" * 32, spans("a" * 32, "2", "3", "4"), {}, now=100.0) == 1
    assert pending.add("a" * 32, spans("a" * 32, "2"), {}, now=101.0) == 0  # a retry fits
    assert pending.add("b" * 32, spans("b" * 32, "2"), {}, now=102.0) == 1  # one run at most
    assert 0 < redis_conn.ttl(spans_key("a" * 32)) <= 60
    taken = pending.take("a" * 32)
    assert sorted(s.span_id[-1] for s in taken.spans) == ["2", "3"]
    assert not redis_conn.exists(spans_key("a" * 32))
    assert pending.add("b" * 32, spans("b" * 32, "2"), {}, now=103.0) == 0  # room again


@pytest.fixture
def cluster_app(cluster_url: str) -> Iterator[Flask]:
    """The router on the session's Redis Cluster."""
    app = create_app({"redis_url": cluster_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


@pytest.mark.cluster
def test_otlp_runs_assemble_and_trip_on_a_redis_cluster(cluster_app: Flask) -> None:
    """Pending spans, the completing batch and the early trip touch one slot per step."""
    client = cluster_app.test_client()
    make_role(client)
    assert post(client, export(tool("2", "search", 1))).json == {}
    assert post(client, export(root(**PLACED))).json == {}
    assert trace_store(cluster_app).lookup("support", TRACE_ID).trace.tools == ("search",)
    other = TRACE_ID[::-1]
    early = tool("3", "delete_account", 5, **PLACED)
    early["traceId"] = other
    assert post(client, export(early)).status_code == 200
    binding = client.get("/v1/bindings/support", headers=auth(CALLER)).json["binding"]
    assert binding["stage"] == "rolled_back"
