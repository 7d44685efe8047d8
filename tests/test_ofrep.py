"""OFREP: OpenFeature's own providers (Python from PyPI, JS from npm) resolve roles over HTTP.

The Python test drives `openfeature-provider-ofrep` with `openfeature-sdk` against a
live router; the JS test installs `@openfeature/ofrep-provider` and the server SDK
into a temp dir and runs them under node, and skips with its reason when node,
npm or the registry is not there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from openfeature import api
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext
from openfeature.exception import ErrorCode
from openfeature.flag_evaluation import Reason

from router import create_app
from tests.conftest import CALLER, OPERATOR, auth
from tests.live import (
    LiveRouter,
    put_role,
    router,  # noqa: F401  (the pytest fixture the tests below take)
)
from tests.servers import free_port

CANARY = {"current": "sum-v1", "candidate": "sum-v2", "stage": "canary", "share": 0.5,
          "rules": [{"when": {"tenant": ["internal"]}, "arm": "candidate", "name": "staff"}]}
BODY = {"model": {"name": "gpt-test"}, "instructions": "Summarize; keep every table.",
        "tools": [{"name": "search", "parameters": {"type": "object"}}]}
SINGLE = "/ofrep/v1/evaluate/flags/{role}"
BULK = "/ofrep/v1/evaluate/flags"


@pytest.fixture
def of_client(router: LiveRouter) -> Iterator[Any]:  # noqa: F811
    """An OpenFeature client on the real OFREP provider, pointed at the live router."""
    provider = OFREPProvider(router.url, headers_factory=lambda: auth(CALLER))
    api.set_provider(provider, domain="rolegate-test")
    yield api.get_client(domain="rolegate-test")
    api.clear_providers()


def test_the_python_provider_resolves_what_v1_resolve_answers(
        router: LiveRouter, of_client: Any) -> None:  # noqa: F811
    """For 40 job keys the provider's value and variant are /v1/resolve's config and arm."""
    put_role(router, "summarizer", **CANARY)
    seen = set()
    for n in range(40):
        key = f"job-{n}"
        details = of_client.get_string_details(
            "summarizer", "fallback", EvaluationContext(targeting_key=key))
        expected = router.api("GET", f"/v1/resolve/summarizer?key={key}", token=CALLER)
        assert details.error_code is None, details.error_message
        assert (details.value, details.variant) == (expected["config"], expected["arm"])
        assert details.reason == Reason.SPLIT
        assert details.flag_metadata["stage"] == "canary"
        assert details.flag_metadata["version"] == expected["version"]
        seen.add(details.variant)
    assert seen == {"current", "candidate"}


def test_context_attributes_drive_the_targeting_rules(
        router: LiveRouter, of_client: Any) -> None:  # noqa: F811
    """A context attribute a rule names picks the arm: TARGETING_MATCH, with the rule."""
    put_role(router, "summarizer", **{**CANARY, "share": 0.01})
    staff = of_client.get_string_details(
        "summarizer", "fallback",
        EvaluationContext(targeting_key="job-1", attributes={"tenant": "internal"}))
    assert (staff.value, staff.variant, staff.reason) == ("sum-v2", "candidate",
                                                          Reason.TARGETING_MATCH)
    assert staff.flag_metadata["rule"] == "staff"
    assert staff.flag_metadata["attr.tenant"] == "internal"
    other = of_client.get_string_details(
        "summarizer", "fallback",
        EvaluationContext(targeting_key="job-1", attributes={"tenant": "acme", "seats": 3}))
    # bucket("summarizer", "job-1") is above 0.01: no rule, so the bucket says current.
    assert (other.value, other.variant, other.reason) == ("sum-v1", "current", Reason.SPLIT)


def test_the_body_comes_as_metadata_when_asked(router: LiveRouter) -> None:  # noqa: F811
    """With X-Rolegate-Include: body the metadata holds the config body as JSON text."""
    put_role(router, "summarizer", current="sum-v1")
    router.api("PUT", "/v1/configs/sum-v1", json={"body": BODY})
    provider = OFREPProvider(router.url, headers_factory=lambda: {
        **auth(CALLER), "X-Rolegate-Include": "body"})
    api.set_provider(provider, domain="rolegate-body")
    try:
        details = api.get_client(domain="rolegate-body").get_string_details(
            "summarizer", "fallback", EvaluationContext(targeting_key="job-1"))
    finally:
        api.clear_providers()
    assert details.value == "sum-v1" and details.reason == Reason.STATIC
    body = json.loads(details.flag_metadata["body"])
    assert body["instructions"] == BODY["instructions"] and body["model"]["name"] == "gpt-test"


@pytest.mark.parametrize("flag, context, code", [
    ("nobody", EvaluationContext(targeting_key="job-1"), ErrorCode.FLAG_NOT_FOUND),
    ("summarizer", EvaluationContext(), ErrorCode.TARGETING_KEY_MISSING),
    ("summarizer", EvaluationContext(attributes={"tenant": "x"}),
     ErrorCode.TARGETING_KEY_MISSING),
    ("summarizer", EvaluationContext(targeting_key="k" * 501), ErrorCode.INVALID_CONTEXT),
])
def test_refusals_reach_the_provider_as_their_error_codes(
        router: LiveRouter, of_client: Any, flag: str, context: EvaluationContext,  # noqa: F811
        code: ErrorCode) -> None:
    """Unknown role, no targeting key, a key over 500 characters: the provider names each."""
    put_role(router, "summarizer", **CANARY)
    details = of_client.get_string_details(flag, "fallback", context)
    assert (details.value, details.error_code) == ("fallback", code), details.error_message


def test_the_answers_have_ofreps_shapes(router: LiveRouter) -> None:  # noqa: F811
    """Status and body of each refusal are OFREP's: key, errorCode, errorDetails."""
    put_role(router, "summarizer", **CANARY)
    url = router.url + SINGLE.format(role="summarizer")
    cases = [(b"{not json", 400, "PARSE_ERROR"), (b'"text"', 400, "PARSE_ERROR"),
             (b'{"context": []}', 400, "TARGETING_KEY_MISSING"),
             (b'{"context": {"targetingKey": true}}', 400, "TARGETING_KEY_MISSING"),
             (b'{"context": {}}', 400, "TARGETING_KEY_MISSING")]
    for raw, status, code in cases:
        answer = requests.post(url, data=raw, timeout=5, headers={
            **auth(CALLER), "Content-Type": "application/json"})
        assert answer.status_code == status, raw
        assert answer.json()["key"] == "summarizer" and answer.json()["errorCode"] == code
        assert answer.json()["errorDetails"]
    missing = requests.post(router.url + SINGLE.format(role="nobody"), timeout=5,
                            json={"context": {"targetingKey": "k"}}, headers=auth(CALLER))
    assert missing.status_code == 404 and missing.json()["errorCode"] == "FLAG_NOT_FOUND"
    bulk = requests.post(router.url + BULK, json={"context": {}}, headers=auth(CALLER),
                         timeout=5)
    assert bulk.status_code == 400 and "key" not in bulk.json()
    assert bulk.json()["errorCode"] == "TARGETING_KEY_MISSING"


def test_same_tokens_and_scopes_as_the_api(router: LiveRouter, app: Flask) -> None:  # noqa: F811
    """No token 401, unknown 401, a token limited to another role 403 and left out of bulk."""
    put_role(router, "summarizer", **CANARY)
    put_role(router, "labeler", current="lab-v1")
    body = {"context": {"targetingKey": "k"}}
    url = router.url + SINGLE.format(role="summarizer")
    assert requests.post(url, json=body, timeout=5).status_code == 401
    assert requests.post(url, json=body, headers=auth("nope"), timeout=5).status_code == 401
    limited = create_app({"redis_url": app.extensions["rolegate"].settings.redis_url,
                          "tokens": f"{OPERATOR}:operator,lab-secret:caller:labeler",
                          "testing": True})
    client = limited.test_client()
    try:
        assert client.post(SINGLE.format(role="summarizer"), json=body,
                           headers=auth("lab-secret")).status_code == 403
        flags = client.post(BULK, json=body, headers=auth("lab-secret")).json["flags"]
        assert [flag["key"] for flag in flags] == ["labeler"]
    finally:
        limited.extensions["rolegate"].cache.stop()
        limited.extensions["rolegate"].redis.close()


def test_bulk_has_an_etag_and_answers_304_until_a_move(router: LiveRouter) -> None:  # noqa: F811
    """Bulk lists every role; the same ETag back is a 304; a promotion changes the tag."""
    put_role(router, "summarizer", **CANARY)
    put_role(router, "labeler", current="lab-v1")
    body = {"context": {"targetingKey": "job-3"}}
    first = requests.post(router.url + BULK, json=body, headers=auth(CALLER), timeout=5)
    assert first.status_code == 200 and first.headers["ETag"]
    flags = {flag["key"]: flag for flag in first.json()["flags"]}
    assert flags["labeler"]["value"] == "lab-v1" and flags["labeler"]["reason"] == "STATIC"
    assert flags["summarizer"]["value"] == router.api(
        "GET", "/v1/resolve/summarizer?key=job-3", token=CALLER)["config"]
    again = requests.post(router.url + BULK, json=body, timeout=5,
                          headers={**auth(CALLER), "If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["ETag"] == first.headers["ETag"]
    version = router.api("GET", "/v1/bindings/summarizer")["version"]
    router.api("POST", "/v1/bindings/summarizer/promote", json={"reason": "test"},
               headers={"If-Match": str(version)})
    moved = requests.post(router.url + BULK, json=body, timeout=5,
                          headers={**auth(CALLER), "If-None-Match": first.headers["ETag"]})
    assert moved.status_code == 200 and moved.headers["ETag"] != first.headers["ETag"]
    # The flag follows the move as /v1/resolve does (in full a key may sit in the holdback).
    assert {f["key"]: f for f in moved.json()["flags"]}["summarizer"]["value"] == router.api(
        "GET", "/v1/resolve/summarizer?key=job-3", token=CALLER)["config"]


def test_no_table_and_no_redis_is_ofreps_500_general() -> None:
    """A worker that never read the table answers 500 GENERAL, the status providers parse."""
    app = create_app({"redis_url": f"redis://127.0.0.1:{free_port()}/0",
                      "tokens": f"{CALLER}:caller", "testing": True})
    try:
        answer = app.test_client().post(SINGLE.format(role="summarizer"), headers=auth(CALLER),
                                        json={"context": {"targetingKey": "k"}})
        assert answer.status_code == 500
        assert answer.json["errorCode"] == "GENERAL" and answer.json["key"] == "summarizer"
    finally:
        app.extensions["rolegate"].redis.close()


NODE_SCRIPT = r"""
const { OpenFeature } = require('@openfeature/server-sdk');
const { OFREPProvider } = require('@openfeature/ofrep-provider');
const { OFREPApi } = require('@openfeature/ofrep-core');
(async () => {
  const [baseUrl, token] = process.argv.slice(2);
  const headers = [['Authorization', `Bearer ${token}`]];
  await OpenFeature.setProviderAndWait(new OFREPProvider({ baseUrl, headers }));
  const client = OpenFeature.getClient();
  const out = { single: [] };
  for (const key of ['job-1', 'job-2', 'job-3', 'job-4', 'job-5', 'job-6']) {
    const d = await client.getStringDetails('summarizer', 'fallback', { targetingKey: key });
    out.single.push({ key, value: d.value, variant: d.variant, reason: d.reason,
                      errorCode: d.errorCode });
  }
  const staff = await client.getStringDetails('summarizer', 'fallback',
                                              { targetingKey: 'job-1', tenant: 'internal' });
  out.staff = { value: staff.value, reason: staff.reason, rule: staff.flagMetadata.rule };
  const missing = await client.getStringDetails('nobody', 'fallback', { targetingKey: 'k' });
  out.missing = { value: missing.value, errorCode: missing.errorCode };
  const nokey = await client.getStringDetails('summarizer', 'fallback', {});
  out.nokey = { value: nokey.value, errorCode: nokey.errorCode };
  const ofrep = new OFREPApi(baseUrl);
  const bulk = await ofrep.postBulkEvaluateFlags({ context: { targetingKey: 'job-1' } },
                                                  { headers });
  const etag = bulk.httpResponse.headers.get('etag');
  const cached = await ofrep.postBulkEvaluateFlags(
      { context: { targetingKey: 'job-1' } }, { headers: [...headers, ['If-None-Match', etag]] });
  out.bulk = { status: bulk.httpStatus, keys: bulk.value.flags.map((f) => f.key),
               again: cached.httpStatus };
  // A context as the SDK merges it: global (6) + client (3) + invocation attributes,
  // a list, a nested object, app:version and a 201-character user agent.
  OpenFeature.setContext({ region: 'eu', plan: 'pro', seats: 12, beta: true,
                           'app:version': '4.2.0', locale: 'de-DE' });
  client.setContext({ service: 'billing', groups: ['a', 'b'], meta: { team: 'x' } });
  out.rich = [];
  for (const key of ['job-7', 'job-8', 'job-9', 'job-10']) {
    const d = await client.getStringDetails('summarizer', 'fallback', {
      targetingKey: key, userAgent: 'x'.repeat(201), nested: { a: { b: 1 } }, list: [1, 2] });
    out.rich.push({ key, value: d.value, variant: d.variant, reason: d.reason,
                    errorCode: d.errorCode });
  }
  const richStaff = await client.getStringDetails('summarizer', 'fallback',
      { targetingKey: 'job-7', tenant: 'internal', groups: ['x'] });
  out.richStaff = { value: richStaff.value, reason: richStaff.reason };
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""
NPM_PACKAGES = ("@openfeature/server-sdk", "@openfeature/ofrep-provider",
                "@openfeature/ofrep-core")


@pytest.fixture(scope="module")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The JS provider installed from npm into a temp dir (its cache there too); skip if not."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node or npm is not on PATH: the JS OFREP provider cannot run here")
    where = tmp_path_factory.mktemp("ofrep-js")
    env = {**os.environ, "npm_config_cache": str(where / ".npm-cache"),
           "npm_config_update_notifier": "false", "npm_config_fund": "false",
           "npm_config_audit": "false"}
    try:
        installed = subprocess.run([npm, "install", "--prefix", str(where), "--no-save",
                                    *NPM_PACKAGES], env=env, capture_output=True, text=True,
                                   timeout=300, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("npm install of the JS OFREP provider took over 300 s")
    if installed.returncode != 0:
        pytest.skip(f"npm could not install the JS OFREP provider: {installed.stderr[-500:]}")
    return where


def test_the_js_provider_resolves_the_same(router: LiveRouter,  # noqa: F811
                                           node_modules: Path) -> None:
    """Under node, @openfeature/ofrep-provider gets /v1/resolve's answers and OFREP's errors,
    also for a context merged from global, client and invocation attributes of any shape."""
    put_role(router, "summarizer", **{**CANARY, "share": 0.5})
    script = node_modules / "check.js"
    script.write_text(NODE_SCRIPT)
    ran = subprocess.run(["node", str(script), router.url, CALLER], capture_output=True,
                         text=True, timeout=120, cwd=node_modules, stdin=subprocess.DEVNULL,
                         check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    for single in out["single"]:
        expected = router.api("GET", f"/v1/resolve/summarizer?key={single['key']}",
                              token=CALLER)
        assert (single["value"], single["variant"]) == (expected["config"], expected["arm"])
        assert single["reason"] == "SPLIT" and single.get("errorCode") is None
    assert out["staff"] == {"value": "sum-v2", "reason": "TARGETING_MATCH", "rule": "staff"}
    assert out["missing"] == {"value": "fallback", "errorCode": "FLAG_NOT_FOUND"}
    assert out["nokey"] == {"value": "fallback", "errorCode": "TARGETING_KEY_MISSING"}
    assert out["bulk"] == {"status": 200, "keys": ["summarizer"], "again": 304}
    # The merged rich context is evaluated as /v1/resolve answers the same key and attributes.
    for rich in out["rich"]:
        expected = router.api("GET", f"/v1/resolve/summarizer?key={rich['key']}", token=CALLER)
        assert (rich["value"], rich["variant"]) == (expected["config"], expected["arm"]), rich
        assert rich["reason"] == "SPLIT" and rich.get("errorCode") is None, rich
    assert out["richStaff"] == {"value": "sum-v2", "reason": "TARGETING_MATCH"}
