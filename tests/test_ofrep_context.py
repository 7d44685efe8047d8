"""OpenFeature contexts as users send them: the SDK's merged context, any JSON, is evaluated.

Issue 37: a context merged from global (6), client (3) and invocation (3)
attributes, a list, a nested object, `app:version` or a 201-character user
agent was a 400 INVALID_CONTEXT, and the SDK served its code default for every
flag. Now the attributes a role's rules read are used (a number or boolean as
its JSON text) and the rest are ignored; the answers agree with /v1/resolve
given the same key and the attributes the rules read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
import requests
from openfeature import api
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext
from openfeature.flag_evaluation import Reason

from router.api.ofrep_shapes import MAX_BODY_BYTES
from tests.conftest import CALLER, auth
from tests.live import (
    LiveRouter,
    put_role,
    router,  # noqa: F401  (the pytest fixture the tests below take)
)

USER_AGENT = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/131.0.0.0 Safari/537.36 rolegate-test/" + "x" * 201)[:201]
#: Rules that read a string, a boolean and a number from the context.
RULES = [{"when": {"tenant": ["internal"]}, "arm": "candidate", "name": "staff"},
         {"when": {"beta": ["true"], "seats": ["3"]}, "arm": "candidate", "name": "beta-3"},
         {"when": {"region": ["eu"]}, "arm": "current", "name": "eu-stays"}]
CANARY = {"current": "sum-v1", "candidate": "sum-v2", "stage": "canary", "share": 0.3,
          "rules": RULES}
SINGLE = "/ofrep/v1/evaluate/flags/{role}"


@pytest.fixture
def of_client(router: LiveRouter) -> Iterator[Any]:  # noqa: F811
    """The SDK as an application sets it up: global, client and invocation contexts merged."""
    api.set_provider(OFREPProvider(router.url, headers_factory=lambda: auth(CALLER)),
                     domain="rolegate-context")
    api.set_evaluation_context(EvaluationContext(attributes={
        "app:version": "4.2.1", "userAgent": USER_AGENT, "groups": ["a", "b"],
        "device": {"os": "linux", "screen": {"w": 1920, "h": 1080}},
        "locale": "en-GB", "sessionStart": 1733480000.25}))
    client = api.get_client(domain="rolegate-context")
    client.context = EvaluationContext(attributes={
        "service": "summarizer-worker", "beta": True, "tags": []})
    yield client
    api.clear_providers()
    api.set_evaluation_context(EvaluationContext())


def _invocation(n: int) -> dict[str, Any]:
    """Three invocation attributes that walk every rule and none across the keys."""
    return {"tenant": ["internal", "acme", None][n % 3], "seats": [3, 4, 3.0][n % 4 % 3],
            "region": "eu" if n % 5 == 0 else "us"}


def _coerced(value: Any) -> str | None:
    """What /v1/resolve's attr.<name> would carry for a context value (None: absent)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    return None


def test_a_merged_sdk_context_is_evaluated_as_v1_resolve_answers(
        router: LiveRouter, of_client: Any) -> None:  # noqa: F811
    """12 merged attributes with a list, a nested object, app:version, a 201-char UA: no error,
    and value, variant, reason and rule equal /v1/resolve's for the attributes the rules read."""
    put_role(router, "summarizer", **CANARY)
    reasons = set()
    for n in range(60):
        key = f"job-{n}"
        invocation = _invocation(n)
        details = of_client.get_string_details(
            "summarizer", "fallback", EvaluationContext(targeting_key=key, attributes=invocation))
        assert details.error_code is None, details.error_message
        read = {"tenant": invocation["tenant"], "seats": invocation["seats"], "beta": True,
                "region": invocation["region"]}
        query = {"key": key, **{f"attr.{name}": _coerced(value) for name, value in read.items()
                                if _coerced(value) is not None}}
        expected = router.api("GET", f"/v1/resolve/summarizer?{urlencode(query)}", token=CALLER)
        assert (details.value, details.variant) == (expected["config"], expected["arm"]), key
        assert details.flag_metadata.get("rule") == expected.get("rule"), key
        for name, value in expected.get("attributes", {}).items():
            assert details.flag_metadata[f"attr.{name}"] == value
        reasons.add(details.reason)
    # Every rule and the bucket decided somewhere among the 60 keys.
    assert reasons == {Reason.TARGETING_MATCH, Reason.SPLIT}


def test_bulk_takes_the_same_context(router: LiveRouter) -> None:  # noqa: F811
    """The bulk endpoint reads the same rich context per role: each role its own rules."""
    put_role(router, "summarizer", **CANARY)
    put_role(router, "labeler", current="lab-v1", candidate="lab-v2", stage="canary",
             share=0.01, rules=[{"when": {"service": ["labeler-worker"]}, "arm": "candidate"}])
    context = {"targetingKey": "job-1", "tenant": "internal", "service": "labeler-worker",
               "groups": ["a", "b"], "device": {"os": "linux"}, "app:version": "4.2.1",
               "userAgent": USER_AGENT, "beta": True, "seats": 3, "tags": None}
    r = requests.post(router.url + "/ofrep/v1/evaluate/flags", json={"context": context},
                      headers=auth(CALLER), timeout=5)
    assert r.status_code == 200, r.text
    flags = {flag["key"]: flag for flag in r.json()["flags"]}
    assert (flags["summarizer"]["variant"], flags["summarizer"]["metadata"]["rule"]) == (
        "candidate", "staff")
    assert flags["labeler"]["variant"] == "candidate"
    assert flags["labeler"]["reason"] == "TARGETING_MATCH"


@pytest.mark.parametrize("context, value", [
    ({"targetingKey": 7}, "7"),  # a number keys the job by its text, as ?key=7 would
    ({"targetingKey": "job-1", "tenant": ["internal"]}, None),  # a list never matches a rule
    ({"targetingKey": "job-1", "tenant": {"id": "internal"}}, None),
    ({"targetingKey": "job-1", "bad name": "x", "a" * 65: "y"}, None),  # unread: ignored
])
def test_any_json_context_is_accepted(router: LiveRouter, context: dict[str, Any],  # noqa: F811
                                      value: str | None) -> None:
    """Numbers, lists, objects and names no rule could name: 200, never INVALID_CONTEXT."""
    put_role(router, "summarizer", **CANARY)
    r = requests.post(router.url + SINGLE.format(role="summarizer"), json={"context": context},
                      headers=auth(CALLER), timeout=5)
    assert r.status_code == 200, r.text
    expected = router.api("GET", f"/v1/resolve/summarizer?key={context['targetingKey']}",
                          token=CALLER)
    assert r.json()["value"] == expected["config"] and "rule" not in r.json()["metadata"]


@pytest.mark.parametrize("body, code", [
    ({"context": {"tenant": "internal"}}, "TARGETING_KEY_MISSING"),
    ({"context": {"targetingKey": ""}}, "TARGETING_KEY_MISSING"),
    ({"context": {"targetingKey": {"id": 1}}}, "TARGETING_KEY_MISSING"),
    ({"context": "job-1"}, "TARGETING_KEY_MISSING"),
    ({"context": {"targetingKey": "k" * 501}}, "INVALID_CONTEXT"),
    ({"context": {"targetingKey": "k", "blob": "x" * MAX_BODY_BYTES}}, "INVALID_CONTEXT"),
])
def test_what_is_still_refused(router: LiveRouter, body: dict[str, Any],  # noqa: F811
                               code: str) -> None:
    """Only a missing targeting key, a key over 500 characters and a body over 64 KiB."""
    put_role(router, "summarizer", **CANARY)
    r = requests.post(router.url + SINGLE.format(role="summarizer"), json=body,
                      headers=auth(CALLER), timeout=5)
    assert r.status_code == 400, r.text
    assert r.json()["errorCode"] == code and r.json()["key"] == "summarizer"
    assert r.json()["errorDetails"]
