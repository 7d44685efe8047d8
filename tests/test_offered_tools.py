"""A candidate whose registered body offers a tool its role forbids never runs on real jobs.

pydantic-ai's guard hides a forbidden tool from the model, so its runs never call
it and never trip the wire: a config offering `drop_table` would be promoted to
stable. The way into shadow (and any write that lets a candidate run live) is
refused with a 409 naming the tool.
"""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient

from bindings.models import Invariants
from gatekeeper.checks.invariants import offered_breaches
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth

ROLE = "dba"


def _config(client: FlaskClient, config: str, tools: list[str]) -> None:
    body = {"model": {"name": "gpt-4o"}, "instructions": "answer",
            "tools": [{"name": name} for name in tools]}
    r = client.put(f"/v1/configs/{config}", json={"body": body}, headers=auth(OPERATOR))
    assert r.status_code in (200, 201), r.json


def _role(client: FlaskClient, invariants: dict[str, Any], **binding: Any) -> Any:
    body = {"current": "cfg_a", "candidate": "cfg_b", "gate": {"invariants": invariants},
            **binding}
    return client.put(f"/v1/bindings/{ROLE}", json=body, headers=auth(OPERATOR))


def _promote(client: FlaskClient) -> Any:
    return client.post(f"/v1/bindings/{ROLE}/promote", json={"reason": "enter shadow"},
                       headers=auth(GATEKEEPER))


def test_the_config_offering_drop_table_cannot_enter_shadow(client: FlaskClient) -> None:
    """Promoting into shadow is a 409 naming drop_table; the binding stays at version 1."""
    _config(client, "cfg_b", ["run_query", "drop_table"])
    assert _role(client, {"forbidden_tools": ["drop_table"]}).status_code == 201
    r = _promote(client)
    assert r.status_code == 409, r.json
    assert "drop_table" in r.json["error"]["message"]
    assert r.json["error"]["details"]["tools"] == ["drop_table"]
    assert r.json["error"]["details"]["refused"] == "offered_tools"
    record = client.get(f"/v1/bindings/{ROLE}", headers=auth(CALLER)).json
    assert record["version"] == 1 and record["binding"]["stage"] == "stable"
    # Without the tool in its body the same candidate enters shadow.
    _config(client, "cfg_b", ["run_query"])
    r = _promote(client)
    assert r.status_code == 200, r.json
    assert r.json["binding"]["stage"] == "shadow"


def test_a_tool_outside_the_allowlist_is_refused_too(client: FlaskClient) -> None:
    """An allowlist that lacks an offered tool refuses it, named, at shadow entry."""
    _config(client, "cfg_b", ["run_query", "send_email"])
    assert _role(client, {"allowed_tools": ["run_query"]}).status_code == 201
    r = _promote(client)
    assert r.status_code == 409 and r.json["error"]["details"]["tools"] == ["send_email"]


def test_a_binding_written_straight_into_a_live_stage_is_refused(client: FlaskClient) -> None:
    """Creating the role already in shadow (skipping the promote) meets the same guard."""
    _config(client, "cfg_b", ["drop_table"])
    r = _role(client, {"forbidden_tools": ["drop_table"]}, stage="shadow")
    assert r.status_code == 409 and "drop_table" in r.json["error"]["message"]
    assert client.get(f"/v1/bindings/{ROLE}", headers=auth(CALLER)).status_code == 404


def test_candidates_without_a_body_or_without_a_clash_pass() -> None:
    """The pure check lists only offered tools the invariants refuse, in offered order."""
    policy = Invariants(forbidden_tools=("drop_table", "rm"))
    assert offered_breaches(policy, ("rm", "read", "drop_table")) == ("rm", "drop_table")
    assert offered_breaches(policy, ()) == ()
    assert offered_breaches(Invariants(allowed_tools=()), ("read",)) == ("read",)
    assert offered_breaches(Invariants(), ("drop_table",)) == ()
