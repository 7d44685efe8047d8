"""A config write changes only what it names, and never what a live role relies on.

Registering a spec (`rolegate criteria generate ... --spec FILE`) keeps the body the
role's agents read from every resolution; a write that would drop that body, or
make it offer a tool the role forbids, is refused naming the roles and nothing is
written; every version of a config stays readable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask

from router.cli.main import main
from tests.conftest import CALLER, OPERATOR, auth
from tests.servers import werkzeug_server

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "refunds" / "spec.json"
BODY = {"mode": "agent", "model": {"name": "gpt-4.1-mini", "parameters": {}},
        "instructions": "Refund politely.",
        "tools": [{"name": name, "description": "", "parameters": {"type": "object"}}
                  for name in ("lookupOrder", "verifyIdentity")]}


@pytest.fixture
def url(app: Flask) -> Iterator[str]:
    """The router on a loopback port."""
    with werkzeug_server(app) as base:
        yield base


def call(method: str, url: str, token: str = OPERATOR, **kwargs: Any) -> requests.Response:
    """One HTTP call to the router."""
    headers = {**auth(token), **kwargs.pop("headers", {})}
    with requests.request(method, url, headers=headers, timeout=10, **kwargs) as answer:
        return answer


def put_config(url: str, config: str, body: dict[str, Any]) -> requests.Response:
    """PUT /v1/configs/<config> as an operator."""
    return call("PUT", f"{url}/v1/configs/{config}", json=body)


def put_role(url: str, binding: dict[str, Any]) -> None:
    """Create role `refunds` with `binding`."""
    answer = call("PUT", f"{url}/v1/bindings/refunds", json=binding)
    assert answer.status_code == 201, answer.text


def resolved_body(url: str, key: str = "k1") -> Any:
    """The body `GET /v1/resolve/refunds?include=body` answers for `key`."""
    answer = call("GET", f"{url}/v1/resolve/refunds?key={key}&include=body", CALLER)
    assert answer.status_code == 200, answer.text
    return answer.json()["body"]


def record(url: str, config: str) -> dict[str, Any]:
    """The config's stored record."""
    answer = call("GET", f"{url}/v1/configs/{config}", CALLER)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_criteria_generate_with_a_spec_keeps_the_body_resolves_answer(url: str) -> None:
    """`rolegate criteria generate ROLE --config CFG --spec FILE`: version 2, the body survives."""
    assert put_config(url, "refunds_v1", {"body": BODY}).status_code == 201
    put_role(url, {"current": "refunds_v1"})
    assert resolved_body(url) == BODY
    result = CliRunner().invoke(main, ["criteria", "generate", "refunds", "--config",
                                       "refunds_v1", "--spec", str(SPEC), "--url", url,
                                       "--token", OPERATOR])
    assert result.exit_code == 0, result.output
    assert "refunds_v1: 9 criteria (version 2)" in result.output
    stored = record(url, "refunds_v1")
    assert stored["version"] == 2 and stored["body"] == BODY
    assert len(stored["criteria"]) == 9
    assert resolved_body(url) == BODY
    # Registering the body again keeps the spec and its criteria.
    again = put_config(url, "refunds_v1", {"body": {**BODY, "instructions": "Refund briefly."}})
    assert again.status_code == 200, again.text
    assert again.json()["spec"] == stored["spec"] and len(again.json()["criteria"]) == 9
    assert again.json()["diff"]["summary"].startswith("0 added, 0 removed, 0 changed")


def test_dropping_a_body_a_live_role_serves_is_refused_naming_the_roles(url: str) -> None:
    """`"body": null` on the role's current or live candidate: 409 naming roles; nothing written."""
    for config in ("refunds_v1", "refunds_v2", "refunds_v3"):
        assert put_config(url, config, {"body": BODY}).status_code == 201
    put_role(url, {"current": "refunds_v1", "candidate": "refunds_v2", "stage": "canary",
                   "share": 0.5})
    for config, how in (("refunds_v1", "refunds (current)"),
                        ("refunds_v2", "refunds (candidate in canary)")):
        answer = put_config(url, config, {"body": None, "spec": {"system": "x"}})
        assert answer.status_code == 409, answer.text
        error = answer.json()["error"]
        assert how in error["message"]
        assert error["details"]["roles"] == ["refunds"]
        assert error["details"]["refused"] == "body_dropped"
        stored = record(url, config)
        assert stored["version"] == 1 and stored["body"] == BODY and stored["spec"]["system"] == ""
    # A config no live role serves may lose its body.
    dropped = put_config(url, "refunds_v3", {"body": None})
    assert dropped.status_code == 200, dropped.text
    assert "body" not in record(url, "refunds_v3")


def test_every_config_version_stays_readable(url: str) -> None:
    """GET /v1/configs/<c>/versions/<n> answers each version as written; unknown ones 404."""
    assert put_config(url, "refunds_v1", {"body": BODY}).status_code == 201
    spec = json.loads(SPEC.read_text())
    assert put_config(url, "refunds_v1", {"spec": spec}).status_code == 200
    assert put_config(url, "refunds_v1", {"description": "terse", "spec": spec}).status_code == 200
    first = call("GET", f"{url}/v1/configs/refunds_v1/versions/1", CALLER)
    assert first.status_code == 200 and first.headers["ETag"] == '"1"'
    assert first.json()["body"] == BODY and first.json()["criteria"] == []
    second = call("GET", f"{url}/v1/configs/refunds_v1/versions/2", CALLER).json()
    assert second["version"] == 2 and len(second["criteria"]) == 9 and second["body"] == BODY
    listing = call("GET", f"{url}/v1/configs/refunds_v1/versions", CALLER).json()
    assert [v["version"] for v in listing["versions"]] == [1, 2, 3]
    assert listing["versions"][2]["description"] == "terse"
    assert call("GET", f"{url}/v1/configs/refunds_v1/versions/4", CALLER).status_code == 404
    bad = call("GET", f"{url}/v1/configs/refunds_v1/versions/two", CALLER)
    assert bad.status_code == 400 and "version" in bad.json()["error"]["message"]


def _dba(url: str, stage: str, share: float, **gate: Any) -> None:
    tools = [{"name": "run_query"}]
    for config in ("dba_a", "dba_b"):
        assert put_config(url, config, {"body": {**BODY, "tools": tools}}).status_code == 201
    binding = {"current": "dba_a", "candidate": "dba_b", "stage": stage, "share": share,
               "gate": {"invariants": {"forbidden_tools": ["drop_table"]}, **gate}}
    answer = call("PUT", f"{url}/v1/bindings/dba", json=binding)
    assert answer.status_code == 201, answer.text


@pytest.mark.parametrize("config, how", [("dba_b", "candidate in canary"), ("dba_a", "current")])
def test_a_served_config_may_not_start_offering_a_forbidden_tool(url: str, config: str,
                                                                 how: str) -> None:
    """PUT a body offering drop_table to a config a canary serves: 409 like the binding write."""
    _dba(url, "canary", 0.5)
    body = {**BODY, "tools": [{"name": "run_query"}, {"name": "drop_table"}]}
    answer = put_config(url, config, {"body": body})
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert error["code"] == "conflict"
    assert error["details"]["refused"] == "offered_tools"
    assert error["details"]["tools"] == ["drop_table"] and error["details"]["roles"] == ["dba"]
    assert f"dba ({how})" in error["message"] and "drop_table" in error["message"]
    stored = record(url, config)
    assert stored["version"] == 1 and [t["name"] for t in stored["body"]["tools"]] == ["run_query"]
    served = call("GET", f"{url}/v1/resolve/dba?key=k&include=body", CALLER).json()
    assert "drop_table" not in json.dumps(served)


def test_a_candidate_not_yet_live_may_change_its_body(url: str) -> None:
    """Before shadow the candidate serves nothing: its body may change; shadow entry checks it."""
    _dba(url, "stable", 0.0)
    body = {**BODY, "tools": [{"name": "drop_table"}]}
    assert put_config(url, "dba_b", {"body": body}).status_code == 200
    promoted = call("POST", f"{url}/v1/bindings/dba/promote", json={"reason": "shadow"})
    assert promoted.status_code == 409
    assert promoted.json()["error"]["details"]["refused"] == "offered_tools"


def test_a_binding_write_bringing_in_a_current_that_offers_a_forbidden_tool_is_refused(
        url: str) -> None:
    """The binding write holds the same line for current: a new current offering drop_table, 409."""
    _dba(url, "stable", 0.0)
    offering = {**BODY, "tools": [{"name": "drop_table"}]}
    assert put_config(url, "dba_c", {"body": offering}).status_code == 201
    binding = {"current": "dba_c", "gate": {"invariants": {"forbidden_tools": ["drop_table"]}}}
    answer = call("PUT", f"{url}/v1/bindings/dba", json=binding, headers={"If-Match": "1"})
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"]["details"] == {"role": "dba", "current": "dba_c",
                                                 "refused": "offered_tools",
                                                 "tools": ["drop_table"]}
