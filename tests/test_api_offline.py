"""Offline verdicts over HTTP, and the 409 guarding shadow when a role requires an offline pass."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient

from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth

ROLE = "summarizer"


def _create(client: FlaskClient, require: bool) -> None:
    body = {"current": "cfg_a", "candidate": "cfg_b",
            "gate": {"require_offline_pass": require}}
    r = client.put(f"/v1/bindings/{ROLE}", json=body, headers=auth(OPERATOR))
    assert r.status_code == 201, r.json


def _promote(client: FlaskClient) -> Any:
    return client.post(f"/v1/bindings/{ROLE}/promote", json={"reason": "enter shadow"},
                       headers=auth(GATEKEEPER))


def _post(client: FlaskClient, passed: bool, config: str = "cfg_b") -> Any:
    body = {"config": config, "passed": passed,
            "reasons": [] if passed else ["summarize-keep-tables-001: pass rate 0.000"],
            "planned_runs": 13, "completed_runs": 13}
    return client.post(f"/v1/roles/{ROLE}/offline", json=body, headers=auth(GATEKEEPER))


def test_verdicts_are_stored_per_config_and_read_back(client: FlaskClient) -> None:
    """POST stores a verdict for (role, config); GET returns it with who and when; list shows all."""
    _create(client, require=False)
    r = _post(client, True)
    assert r.status_code == 201, r.json
    assert r.json["actor"] == "gatekeeper" and r.json["verdict"]["passed"] is True
    # A verdict is stored for either arm (tests/test_suite_first_contact.py: only those).
    assert _post(client, False, config="cfg_a").status_code == 201
    r = client.get(f"/v1/roles/{ROLE}/offline/cfg_b", headers=auth(CALLER))
    assert r.status_code == 200 and r.json["verdict"]["planned_runs"] == 13
    r = client.get(f"/v1/roles/{ROLE}/offline", headers=auth(CALLER))
    assert [v["verdict"]["config"] for v in r.json["verdicts"]] == ["cfg_a", "cfg_b"]
    r = client.get(f"/v1/roles/{ROLE}/offline/cfg_x", headers=auth(CALLER))
    assert r.status_code == 404 and r.json["error"]["code"] == "not_found"


def test_bad_verdict_bodies_are_4xx(client: FlaskClient) -> None:
    """A missing field is 422, a non-JSON body 400, a caller token 403; nothing is stored."""
    r = client.post(f"/v1/roles/{ROLE}/offline", json={"config": "cfg_b"},
                    headers=auth(GATEKEEPER))
    assert r.status_code == 422 and "passed" in r.json["error"]["message"]
    r = client.post(f"/v1/roles/{ROLE}/offline", data="nope", headers=auth(GATEKEEPER))
    assert r.status_code == 400
    r = client.post(f"/v1/roles/{ROLE}/offline", json={"config": "cfg_b", "passed": True},
                    headers=auth(CALLER))
    assert r.status_code == 403
    assert client.get(f"/v1/roles/{ROLE}/offline", headers=auth(CALLER)).json["verdicts"] == []


def test_shadow_needs_an_offline_pass_when_the_policy_requires_one(client: FlaskClient) -> None:
    """Without a verdict, or with a failing one, entering shadow is a 409 naming what is missing."""
    _create(client, require=True)
    r = _promote(client)
    assert r.status_code == 409, r.json
    assert r.json["error"]["details"]["missing"] == "offline_pass"
    assert "cfg_b" in r.json["error"]["message"]
    _post(client, False)
    r = _promote(client)
    assert r.status_code == 409
    assert "summarize-keep-tables-001" in r.json["error"]["message"]
    version = client.get(f"/v1/bindings/{ROLE}", headers=auth(CALLER)).json["version"]
    assert version == 1
    _post(client, True)
    r = _promote(client)
    assert r.status_code == 200, r.json
    assert r.json["binding"]["stage"] == "shadow"


def test_roles_without_the_requirement_enter_shadow_freely(client: FlaskClient) -> None:
    """The check only applies when the gate policy sets require_offline_pass."""
    _create(client, require=False)
    r = _promote(client)
    assert r.status_code == 200 and r.json["binding"]["stage"] == "shadow"


def test_writing_a_shadow_stage_directly_needs_the_pass_too(client: FlaskClient) -> None:
    """PUT of a binding already in shadow is checked like a promote into shadow."""
    body = {"current": "cfg_a", "candidate": "cfg_b", "stage": "shadow",
            "gate": {"require_offline_pass": True}}
    r = client.put(f"/v1/bindings/{ROLE}", json=body, headers=auth(OPERATOR))
    assert r.status_code == 409 and r.json["error"]["details"]["missing"] == "offline_pass"
    _create(client, require=True)
    r = client.put(f"/v1/bindings/{ROLE}", json=body, headers={**auth(OPERATOR), "If-Match": "1"})
    assert r.status_code == 409
    _post(client, True)
    r = client.put(f"/v1/bindings/{ROLE}", json=body, headers={**auth(OPERATOR), "If-Match": "1"})
    assert r.status_code == 200 and r.json["binding"]["stage"] == "shadow"


def test_a_canary_that_skips_shadow_needs_the_pass_too(client: FlaskClient) -> None:
    """Setting a canary share straight from stable is refused without a pass, allowed with one."""
    _create(client, require=True)
    r = client.post(f"/v1/bindings/{ROLE}/canary", json={"share": 0.1, "reason": "skip shadow"},
                    headers=auth(OPERATOR))
    assert r.status_code == 409, r.json
    assert r.json["error"]["details"]["missing"] == "offline_pass"
    assert client.get(f"/v1/bindings/{ROLE}", headers=auth(CALLER)).json["version"] == 1
    _post(client, True)
    r = client.post(f"/v1/bindings/{ROLE}/canary", json={"share": 0.1, "reason": "skip shadow"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200 and r.json["binding"]["stage"] == "canary", r.json


def test_moving_a_live_candidate_along_needs_no_new_check(client: FlaskClient) -> None:
    """Once a candidate runs on real jobs, its next steps are the gate's business, not the suite's."""
    _create(client, require=True)
    _post(client, True)
    assert _promote(client).status_code == 200
    _post(client, False)  # a later failing verdict does not freeze a candidate already live
    r = client.post(f"/v1/bindings/{ROLE}/canary", json={"share": 0.5, "reason": "step"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200 and r.json["binding"]["share"] == 0.5, r.json
