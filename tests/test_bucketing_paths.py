"""Every resolve path gives one unit one arm: HTTP (the Flask view and its fast path), OFREP
(single and bulk, fast and Flask), and the SDK in process, for a role bucketed by key with
a drawn salt (version 2) and a role bucketed by tenant; and each says its bucketing.

The arm each path gives is held against `rolegate.routing.bucket` under the binding's
salt and version, read back from the router: the salt the API drew is the one used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from rolegate import Client
from rolegate.integrations.otel import placement_attributes
from rolegate.routing import bucket
from rolegate.spans import Span, assemble
from router.api.ofrep_fast import OfrepFastPath, installed
from router.api.resolve_fast import ResolveFastPath
from tests.conftest import CALLER, OPERATOR, auth
from tests.servers import werkzeug_server

BY_KEY = "by-key"
BY_TENANT = "by-tenant"
KEYS = [f"job-{n}" for n in range(40)]
TENANTS = [f"tenant-{n}" for n in range(12)]
JOBS = [(key, TENANTS[n % len(TENANTS)]) for n, key in enumerate(KEYS)]
STAMPS = {"agent_version": "t", "instruction_hash": "i", "model_id": "m",
          "tool_schema_hash": "s"}


class Counting:
    """Wraps a WSGI callable and counts the requests that reach it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        self.calls += 1
        return self.inner(environ, start_response)


@pytest.fixture
def rolled(app: Flask, client: FlaskClient) -> dict[str, dict[str, Any]]:
    """Both roles on a 50% canary through the API (salts drawn); their stored bindings."""
    out = {}
    for role, extra in ((BY_KEY, {}), (BY_TENANT, {"bucket_by": "tenant"})):
        r = client.put(f"/v1/bindings/{role}", headers=auth(OPERATOR),
                       json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                             "share": 0.5, **extra})
        assert r.status_code == 201, r.json
        out[role] = r.json["binding"]
        assert out[role]["salt"] and out[role]["bucket_version"] == 2
    assert out[BY_KEY]["salt"] != out[BY_TENANT]["salt"]
    return out


def _expected(role: str, binding: dict[str, Any], key: str, tenant: str) -> str:
    unit = tenant if binding.get("bucket_by") else key
    hit = bucket(role, unit, salt=binding["salt"], version=binding["bucket_version"]) < 0.5
    return "candidate" if hit else "current"


def _bucketing(binding: dict[str, Any]) -> dict[str, Any]:
    return {"version": 2, "bucket_by": binding.get("bucket_by"), "salted": True}


@pytest.fixture
def fast(app: Flask) -> Iterator[Counting]:
    """The Flask app behind the resolve fast path, counting what the fast path hands on."""
    layer = app.wsgi_app
    assert isinstance(layer, ResolveFastPath)
    counting = Counting(layer.inner)
    layer.inner = counting
    yield counting
    layer.inner = counting.inner


def _both_arms(arms: dict[tuple[str, str], str]) -> None:
    assert set(arms.values()) == {"current", "candidate"}


def test_http_flask_view(client: FlaskClient, rolled: dict[str, dict[str, Any]],
                         fast: Counting) -> None:
    """GET /v1/resolve with attr.tenant before the key (handed to the Flask view): the
    unit's arm."""
    for role in (BY_KEY, BY_TENANT):
        arms = {}
        for key, tenant in JOBS:
            before = fast.calls
            r = client.get(f"/v1/resolve/{role}?attr.tenant={tenant}&key={key}",
                           headers=auth(CALLER))
            assert r.status_code == 200 and fast.calls == before + 1  # the view answered
            assert r.json["bucketing"] == _bucketing(rolled[role])
            arms[(key, tenant)] = r.json["arm"]
            assert r.json["arm"] == _expected(role, rolled[role], key, tenant), (role, key)
            if role == BY_TENANT:
                assert r.json["attributes"] == {"tenant": tenant}  # the unit, for the trace
        _both_arms(arms)


def test_http_fast_path(client: FlaskClient, rolled: dict[str, dict[str, Any]],
                        fast: Counting) -> None:
    """GET /v1/resolve?key=[&attr.tenant=] (the fast path): the unit's arm under the drawn
    salt; a role bucketed by tenant, asked without one, answers current, unit missing."""
    arms = {}
    for key, tenant in JOBS:
        r = client.get(f"/v1/resolve/{BY_KEY}?key={key}", headers=auth(CALLER))
        assert r.status_code == 200 and fast.calls == 0  # nothing reached Flask
        assert r.json["bucketing"] == _bucketing(rolled[BY_KEY])
        arms[(key, tenant)] = r.json["arm"]
        assert r.json["arm"] == _expected(BY_KEY, rolled[BY_KEY], key, tenant)
    _both_arms(arms)
    arms = {}
    for key, tenant in JOBS:
        r = client.get(f"/v1/resolve/{BY_TENANT}?key={key}&attr.tenant={tenant}",
                       headers=auth(CALLER))
        assert r.status_code == 200 and fast.calls == 0
        arms[(key, tenant)] = r.json["arm"]
        assert r.json["arm"] == _expected(BY_TENANT, rolled[BY_TENANT], key, tenant)
        assert r.json["attributes"] == {"tenant": tenant}
    _both_arms(arms)
    r = client.get(f"/v1/resolve/{BY_TENANT}?key=job-1", headers=auth(CALLER))
    assert fast.calls == 0 and r.json["arm"] == "current"
    assert r.json["bucketing"] == {**_bucketing(rolled[BY_TENANT]), "unit_missing": True}


def _ofrep_paths(app: Flask) -> tuple[OfrepFastPath, Any]:
    found = installed(app)
    assert found is not None
    layer: Any = app.wsgi_app
    while layer.inner is not found:
        layer = layer.inner
    return found, layer


@pytest.mark.parametrize("via", ["fast", "flask"])
def test_ofrep_single_and_bulk(app: Flask, client: FlaskClient,
                               rolled: dict[str, dict[str, Any]], via: str) -> None:
    """OFREP single and bulk, through the fast path and through the Flask views: the unit's
    arm as the variant, the bucketing in the metadata, the unit as attr.tenant."""
    ofrep, layer = _ofrep_paths(app)
    if via == "flask":
        layer.inner = ofrep.inner  # the Flask views alone
    try:
        for role in (BY_KEY, BY_TENANT):
            arms = {}
            for key, tenant in JOBS:
                context = {"context": {"targetingKey": key, "tenant": tenant, "other": [1]}}
                single = client.post(f"/ofrep/v1/evaluate/flags/{role}", json=context,
                                     headers=auth(CALLER)).json
                bulk = client.post("/ofrep/v1/evaluate/flags", json=context,
                                   headers=auth(CALLER)).json
                flag = next(f for f in bulk["flags"] if f["key"] == role)
                # Each evaluation is its own run: its own run id, the rest alike.
                assert single["metadata"].pop("run_id") != flag["metadata"].pop("run_id")
                assert single == flag
                arms[(key, tenant)] = single["variant"]
                assert single["variant"] == _expected(role, rolled[role], key, tenant)
                meta = single["metadata"]
                assert (meta["bucketing.version"], meta["bucketing.salted"]) == (2, True)
                assert meta["bucketing.bucket_by"] == ("tenant" if role == BY_TENANT
                                                       else "targetingKey")
                if role == BY_TENANT:
                    assert meta["attr.tenant"] == tenant
            _both_arms(arms)
        missing = client.post(f"/ofrep/v1/evaluate/flags/{BY_TENANT}",
                              json={"context": {"targetingKey": "job-1"}},
                              headers=auth(CALLER)).json
        assert missing["variant"] == "current" and missing["reason"] == "DEFAULT"
        assert missing["metadata"]["bucketing.unit_missing"] is True
    finally:
        layer.inner = ofrep


def test_sdk_in_process(app: Flask, rolled: dict[str, dict[str, Any]]) -> None:
    """Client.resolve: the unit's arm, its bucketing, and a reported trace carrying the unit
    (recorder and OTel placement alike); no tenant: current, unit missing."""
    with werkzeug_server(app) as url:
        client = Client(url, CALLER, refresh_interval=0.1)
        try:
            for role in (BY_KEY, BY_TENANT):
                arms = {}
                for key, tenant in JOBS:
                    answer = client.resolve(role, key, attributes={"tenant": tenant})
                    arms[(key, tenant)] = answer["arm"]
                    assert answer["arm"] == _expected(role, rolled[role], key, tenant)
                    assert answer["bucketing"] == _bucketing(rolled[role])
                    if role == BY_KEY:  # the precompiled path, no attributes
                        assert client.resolve(role, key)["arm"] == answer["arm"]
                _both_arms(arms)
            answer = client.resolve(BY_TENANT, "job-1", attributes={"tenant": "tenant-3"})
            trace = client.recorder(answer, stamps=STAMPS, run_id="r1").finish()
            assert trace.attributes == {"tenant": "tenant-3"}
            in_shadow = {**answer, "stage": "shadow", "shadow": "cfg_b", "arm": "current",
                         "config": "cfg_a"}  # the same role's answer, were it in shadow
            shadow = client.recorder(in_shadow, stamps=STAMPS, run_id="r2",
                                     shadow=True).finish()
            assert shadow.attributes == {"tenant": "tenant-3"} and shadow.rule is None
            spans = [Span("t1", "s1", None, "invoke_agent", 0, 10,
                          {**placement_attributes(answer), "rolegate.output": "ok"})]
            assert assemble(spans)["attributes"] == {"tenant": "tenant-3"}
            missing = client.resolve(BY_TENANT, "job-1")
            assert missing["arm"] == "current" and missing["bucketing"]["unit_missing"]
        finally:
            client.close()


def test_one_tenant_one_arm_on_every_path(app: Flask, client: FlaskClient,
                                          rolled: dict[str, dict[str, Any]]) -> None:
    """Many keys of one tenant: one arm, the same on HTTP, OFREP and the SDK."""
    def http(key: str, tenant: str) -> str:
        return str(client.get(f"/v1/resolve/{BY_TENANT}?key={key}&attr.tenant={tenant}",
                              headers=auth(CALLER)).json["arm"])

    def ofrep(key: str, tenant: str) -> str:
        return str(client.post(f"/ofrep/v1/evaluate/flags/{BY_TENANT}",
                               json={"context": {"targetingKey": key, "tenant": tenant}},
                               headers=auth(CALLER)).json["variant"])

    with werkzeug_server(app) as url:
        sdk_client = Client(url, CALLER, refresh_interval=0.1)
        try:
            def sdk(key: str, tenant: str) -> str:
                return str(sdk_client.resolve(BY_TENANT, key, {"tenant": tenant})["arm"])

            paths: list[Callable[[str, str], str]] = [http, ofrep, sdk]
            by_tenant = {}
            for tenant in TENANTS[:6]:
                seen = {path(f"{tenant}-job-{n}", tenant) for path in paths for n in range(15)}
                assert len(seen) == 1, tenant
                by_tenant[tenant] = seen.pop()
                assert by_tenant[tenant] == _expected(BY_TENANT, rolled[BY_TENANT], "", tenant)
        finally:
            sdk_client.close()


def test_sdk_counts_every_assignment_of_a_unit_bucketed_role(app: Flask,
                                                             client: FlaskClient) -> None:
    """Resolved in full (its unit is an attribute), a role's jobs are still counted as
    exposures, its shadow runs included, as the precompiled path counts them."""
    r = client.put("/v1/bindings/shadowed", headers=auth(OPERATOR), json={
        "current": "cfg_a", "candidate": "cfg_b", "stage": "shadow", "bucket_by": "tenant"})
    assert r.status_code == 201, r.json
    with werkzeug_server(app) as url:
        sdk = Client(url, CALLER, refresh_interval=0.1)
        try:
            sdk._exposures.drain(0.0)  # what the start counted, if anything
            for n in range(7):
                answer = sdk.resolve("shadowed", f"job-{n}", {"tenant": f"t{n % 3}"})
                assert answer["shadow"] == "cfg_b" and answer["arm"] == "current"
            rows = {(row["arm"], row["config"]): row["count"]
                    for row in sdk._exposures.drain(0.0) if row["role"] == "shadowed"}
            assert rows == {("current", "cfg_a"): 7, ("shadow", "cfg_b"): 7}
        finally:
            sdk.close()
