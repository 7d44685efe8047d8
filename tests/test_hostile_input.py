"""Input a security run found accepted or answered wrongly: each is now a clear 4xx, nothing written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import requests
from flask import Flask
from flask.testing import FlaskClient

from router import create_app
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.servers import werkzeug_server

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
OP = auth(OPERATOR)


def _trace(run_id: str, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"run_id": run_id, "role": "summarizer", "config": "cfg_a",
                            "arm": "current", "tools": ["read"], "stamps": STAMPS}
    body.update(fields)
    return body


def _role(client: FlaskClient) -> None:
    r = client.put("/v1/bindings/summarizer", headers=OP, json={"current": "cfg_a"})
    assert r.status_code == 201, r.json


def _nested(levels: int) -> Any:
    """A JSON value `levels` deep: [[...[1]...]]."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture
def open_app(redis_url: str) -> Iterator[Flask]:
    """The router with no tokens (the Quickstart's default), on the test database."""
    app = create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_a_role_name_with_a_trailing_line_break_is_refused_everywhere(
        client: FlaskClient, redis_conn: redis.Redis) -> None:
    """`authrole\\n` is not a role: not created, not resolved, and its traces are refused."""
    r = client.put("/v1/bindings/authrole%0A", headers=OP, json={"current": "cfg_a"})
    assert r.status_code == 400 and r.json["error"]["details"]["field"] == "role"
    assert client.get("/v1/resolve/authrole%0A?key=k",
                      headers=auth(CALLER)).status_code in (400, 404)
    _role(client)
    r = client.post("/v1/traces", headers=auth(CALLER), json=_trace("t1", role="summarizer\n"))
    assert r.status_code == 422 and r.json["results"][0]["status"] == "refused"
    assert redis_conn.smembers("rolegate:roles") == {b"summarizer"}


def test_a_role_named_like_a_route_is_reserved(client: FlaskClient) -> None:
    """A role named `watch` cannot be created: GET /v1/bindings/watch is the long-poll."""
    r = client.put("/v1/bindings/watch", headers=OP, json={"current": "cfg_a"})
    assert r.status_code == 400 and "reserved" in r.json["error"]["message"]
    spec = client.get("/openapi.json").json
    pattern = spec["paths"]["/v1/resolve/{role}"]["get"]["parameters"][0]["schema"]["pattern"]
    assert pattern.startswith("^(?!(?:watch)$)")


@pytest.mark.parametrize("field", ["tool_errors", "step_count", "tokens", "latency_s",
                                   "cost_usd"])
def test_booleans_are_not_numbers(client: FlaskClient, field: str) -> None:
    """`tool_errors: false` and friends are refused (422), not read as 0."""
    _role(client)
    r = client.post("/v1/traces", headers=auth(CALLER), json=_trace("b1", **{field: False}))
    assert r.status_code == 422, r.json
    assert r.json["results"][0]["error"]["details"]["errors"][0]["field"] == field


@pytest.mark.parametrize("levels", [65, 120, 199])
def test_a_trace_nested_past_64_levels_is_400_on_every_path(client: FlaskClient,
                                                            levels: int) -> None:
    """One depth limit: a trace whose input nests past 64 levels is 400, single or in a batch."""
    _role(client)
    # The trace object is level 1, so its input adds `levels - 1` to reach `levels`.
    deep = _trace("d1", input={"x": _nested(levels - 2)})
    for body in (deep, {"traces": [deep]}):
        r = client.post("/v1/traces", headers=auth(CALLER), data=json.dumps(body),
                        content_type="application/json")
        assert r.status_code == 400 and "64 levels" in r.json["error"]["message"], r.json
    at_limit = _trace("d2", input={"x": _nested(62)})  # 1 + 1 + 62 = 64 levels
    assert client.post("/v1/traces", headers=auth(CALLER), json=at_limit).status_code == 200


def test_a_chunked_body_over_the_limit_is_413(redis_url: str) -> None:
    """A body sent chunked (no Content-Length) over ROLEGATE_MAX_BODY_BYTES is 413, not 400."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "max_body_bytes": 2048})
    with werkzeug_server(app) as url:
        body = json.dumps({"traces": [_trace(f"c{i}") for i in range(40)]}).encode()
        assert len(body) > 2048

        def chunks() -> Iterator[bytes]:
            for start in range(0, len(body), 500):
                yield body[start:start + 500]

        answer = requests.post(f"{url}/v1/traces", data=chunks(), timeout=10,
                               headers={**auth(CALLER), "Content-Type": "application/json"})
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"]["code"] == "request_entity_too_large"
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_an_open_server_refuses_a_foreign_host(open_app: Flask, redis_conn: redis.Redis) -> None:
    """DNS rebinding: a write with `Host: attacker.example` (and its Origin) is 400, nothing written."""
    client = open_app.test_client()
    r = client.put("/v1/bindings/summarizer", json={"current": "cfg_a"},
                   headers={"Host": "attacker.example:8080",
                            "Origin": "http://attacker.example:8080"})
    assert r.status_code == 400 and r.json["error"]["code"] == "host_not_allowed"
    assert redis_conn.keys("rolegate:{summarizer}:*") == []
    for host in ("localhost", "127.0.0.1:8080", "[::1]:8080"):
        assert client.get("/v1/bindings", headers={"Host": host}).status_code == 200, host
    assert client.get("/healthz", headers={"Host": "attacker.example"}).status_code == 200


def test_allowed_hosts_adds_names(redis_url: str) -> None:
    """ROLEGATE_ALLOWED_HOSTS names more hosts (`.suffix` for subdomains); others stay refused."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "allowed_hosts": "rolegate.internal,.corp.example"})
    client = app.test_client()
    for host, status in (("rolegate.internal", 200), ("a.corp.example:443", 200),
                         ("corp.example.evil", 400), ("attacker.example", 400)):
        assert client.get("/v1/bindings", headers={**auth(CALLER), "Host": host}
                          ).status_code == status, host
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_the_bound_address_is_served(app: Flask) -> None:
    """A request to the address the server listens on (not loopback) is served."""
    client = app.test_client()
    r = client.get("/v1/bindings", headers={**auth(CALLER), "Host": "10.1.2.3:8080"},
                   environ_overrides={"SERVER_NAME": "10.1.2.3"})
    assert r.status_code == 200
    # Bound to every interface: a name is refused unless listed (an IP address passes).
    r = client.get("/v1/bindings", headers={**auth(CALLER), "Host": "router.attacker.example"},
                   environ_overrides={"SERVER_NAME": "0.0.0.0"})
    assert r.status_code == 400


def test_open_mode_records_the_gatekeeper_as_gatekeeper(open_app: Flask) -> None:
    """On an open server a rollback sent by the gatekeeper process is its, in history and metrics."""
    client = open_app.test_client()
    r = client.put("/v1/bindings/summarizer", json={"current": "cfg_a", "candidate": "cfg_b"})
    assert r.status_code == 201, r.json
    assert client.post("/v1/bindings/summarizer/promote", json={"reason": "shadow"}
                       ).status_code == 200
    # The counter is the process's: another test in this worker may have counted before.
    before = _gatekeeper_rollbacks(client.get("/metrics").get_data(as_text=True))
    r = client.post("/v1/bindings/summarizer/rollback", json={"reason": "gate failed"},
                    headers={"X-Rolegate-Actor": "gatekeeper"})
    assert r.status_code == 200, r.json
    history = client.get("/v1/bindings/summarizer/history").json["entries"]
    assert history[0]["actor"] == "gatekeeper" and history[1]["actor"] == "anonymous"
    metrics = client.get("/metrics").get_data(as_text=True)
    assert _gatekeeper_rollbacks(metrics) == before + 1.0, metrics


def _gatekeeper_rollbacks(metrics: str) -> float:
    """summarizer's rollbacks by the gatekeeper in a /metrics answer (0 when none yet)."""
    line = 'rolegate_rollbacks_total{actor="gatekeeper",role="summarizer"} '
    found = [row[len(line):] for row in metrics.splitlines() if row.startswith(line)]
    return float(found[0]) if found else 0.0


def test_an_otlp_body_of_the_wrong_shape_is_400(client: FlaskClient) -> None:
    """OTLP JSON whose resourceSpans holds lists, not objects, is a 400 naming where (was a 500)."""
    r = client.post("/v1/traces", headers=OP, json={"resourceSpans": [[None, None]]})
    assert r.status_code == 400 and "resourceSpans[0]" in r.json["error"]["message"]


def test_an_ip_address_host_passes_a_name_that_contains_one_does_not() -> None:
    """A Host that is an IP address is its own origin (a pod scraped by IP), never a rebinding;
    names merely made of numbers and dots, or holding an address, stay refused."""
    from router.server.hosts import allowed, hostname

    for host in ("10.244.3.17:8080", "[fd00::17]:8080", "192.168.1.5"):
        assert allowed(hostname(host), "0.0.0.0", ()), host
    for host in ("10.244.3.17.attacker.example", "0x7f.1", "1.2.3", "attacker.example"):
        assert not allowed(hostname(host), "0.0.0.0", ()), host


def test_a_host_decision_from_memory_is_the_same_decision() -> None:
    """check() remembers each (Host, SERVER_NAME, allowed names) answer: asked again, or with
    another allow list or server name, it decides as `allowed` does; an over-long Host is
    refused every time and never kept."""
    from router.server import hosts
    from router.server.errors import HostNotAllowed

    cases = [("127.0.0.1:8080", "0.0.0.0", ()), ("api.example:8080", "0.0.0.0", ()),
             ("api.example:8080", "0.0.0.0", ("api.example",)),
             ("api.example", "api.example", ()), ("x.attacker.example", "0.0.0.0", (".example",)),
             ("evil.test", "0.0.0.0", (".example",)), ("a" * 400, "0.0.0.0", ())]
    for _ in range(3):
        for header, server_name, extra in cases:
            expected = hosts.allowed(hosts.hostname(header), server_name, extra)
            if expected:
                hosts.check(header, "/v1/resolve/x", server_name, extra)
            else:
                with pytest.raises(HostNotAllowed):
                    hosts.check(header, "/v1/resolve/x", server_name, extra)
    assert ("a" * 400, "0.0.0.0", ()) not in hosts._decided
    assert len(hosts._decided) <= hosts.MAX_DECIDED
