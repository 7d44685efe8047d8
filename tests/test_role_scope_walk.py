"""Every route of the OpenAPI document, called by a token limited to role-a, about role-b.

A role-limited token may read and act on its own roles only. The walk asks each
operation the document lists about role-b (its name in the path, its run id,
`?role=role-b`) and holds every answer to 403, or 404 where the route looks a
run up by id and must not say that another role has it; no answer carries
role-b's trace or changes anything of role-b. A route added later is walked too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from router import create_app
from tests.conftest import OPERATOR, TOKENS, auth

LIMITED_CALLER = "limited-caller-secret"
LIMITED_OPERATOR = "limited-operator-secret"
SECRET = "ROLE-B-OUTPUT-TEXT"
STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
#: What each path parameter is filled with: role-b's own things.
PATH_VALUES = {"role": "role-b", "run_id": "b-run", "config": "cfg_b", "a": "cfg_a",
               "b": "cfg_b", "version": "1"}
#: Bodies that get past validation, so the answer is about the role, not the body.
BODIES: dict[tuple[str, str], Any] = {
    ("post", "/v1/traces"): {"run_id": "b-new", "role": "role-b", "config": "cfg_b",
                             "arm": "candidate", "key": "k", "stamps": STAMPS},
    ("post", "/v1/traces/{run_id}/feedback"): {"tier": "positive"},
    ("post", "/v1/bindings/{role}/canary"): {"share": 1.0},
    ("put", "/v1/bindings/{role}"): {"current": "cfg_x"},
    ("post", "/v1/roles/{role}/offline"): {"config": "cfg_b", "passed": True},
}


def _trace(run_id: str, role: str) -> dict[str, Any]:
    return {"run_id": run_id, "role": role, "config": "cfg_b", "arm": "candidate",
            "key": f"job-{run_id}", "tools": ["read"], "stamps": STAMPS,
            "output_text": SECRET if role == "role-b" else "mine"}


@pytest.fixture
def app(redis_url: str) -> Iterator[Flask]:
    """Roles a and b on a canary, one trace each; tokens limited to role-a (caller, operator)."""
    app = create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05,
                      "tokens": f"{TOKENS},lc={LIMITED_CALLER}:caller:role-a,"
                                f"lo={LIMITED_OPERATOR}:operator:role-a"})
    client = app.test_client()
    for role in ("role-a", "role-b"):
        r = client.put(f"/v1/bindings/{role}", headers=auth(OPERATOR),
                       json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                             "share": 0.5})
        assert r.status_code == 201, r.json
        prefix = role[-1]
        r = client.post("/v1/traces", headers=auth(OPERATOR), json=_trace(f"{prefix}-run", role))
        assert r.status_code == 200, r.json
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def _operations(client: FlaskClient) -> Iterator[tuple[str, str, dict[str, Any]]]:
    spec = client.get("/openapi.json").json
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if isinstance(op, dict) and "responses" in op:
                yield method, path, op


def _calls(method: str, path: str, op: dict[str, Any]) -> Iterator[str]:
    """The URLs to try for one operation: role-b's values in the path, and in ?role= if taken."""
    url = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m.group(1)], path)
    query = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
    if "role" in query:
        yield f"{url}?role=role-b"
    yield url if path != "/v1/bindings/watch" else f"{url}?timeout=0"


def _role_b_state(conn: redis.Redis) -> dict[str, Any]:
    return {key: conn.dump(key) for key in sorted(conn.keys("rolegate:{role-b}:*"))
            if b":pending:" not in key and b":window:" not in key}


@pytest.mark.parametrize("token", [LIMITED_CALLER, LIMITED_OPERATOR])
def test_no_route_gives_a_role_a_token_anything_of_role_b(app: Flask, token: str,
                                                          redis_conn: redis.Redis) -> None:
    """Each operation about role-b: 401/403/404 (never role-b's data), role-b left untouched."""
    client = app.test_client()
    before = _role_b_state(redis_conn)
    leaks = []
    walked = 0
    spec_security = client.get("/openapi.json").json["security"]
    for method, path, op in _operations(client):
        about_b = "{role}" in path or "{run_id}" in path
        for url in _calls(method, path, op):
            about_b = about_b or "role=role-b" in url
            if method != "get" and not about_b:
                continue  # a write about no role at all says nothing of role-b
            walked += 1
            r = client.open(url, method=method.upper(), headers=auth(token),
                            json=BODIES.get((method, path), {}))
            text = r.get_data(as_text=True)
            public = op.get("security", spec_security) == []
            if SECRET in text:
                leaks.append(f"{method.upper()} {url}: {r.status_code} holds role-b's trace")
            elif public:
                continue  # a page shell anyone may load: it holds no role's data (checked above)
            elif about_b and r.status_code not in (403, 404):
                leaks.append(f"{method.upper()} {url}: {r.status_code} {text[:200]}")
            elif about_b and r.status_code == 404 and "role-b" in text:
                leaks.append(f"{method.upper()} {url}: 404 names role-b: {text[:200]}")
    assert leaks == []
    assert walked >= 30
    assert _role_b_state(redis_conn) == before
    # The same token still reads its own role's run (the walk refuses by role, not by route).
    r = client.get("/v1/traces/a-run", headers=auth(token))
    assert r.status_code == 200 and r.json["role"] == "role-a"
