"""A first walk through the API: create, resolve, canary, rollback."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.conftest import CALLER, OPERATOR, auth


def test_create_resolve_canary_rollback(client: FlaskClient) -> None:
    """A role can be created, resolved, put on canary and rolled back."""
    # No holdback: with a salt drawn per rollout, any one key is held back 5% of the time.
    body = {"current": "cfg_a", "candidate": "cfg_b", "holdback": 0.0}
    r = client.put("/v1/bindings/summarizer", json=body, headers=auth(OPERATOR))
    assert r.status_code == 201, r.json
    assert r.json["version"] == 1
    r = client.get("/v1/resolve/summarizer?key=job-1", headers=auth(CALLER))
    assert r.status_code == 200, r.json
    assert r.json["config"] == "cfg_a" and r.json["arm"] == "current"
    r = client.post("/v1/bindings/summarizer/canary", json={"share": 1.0, "reason": "go"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200, r.json
    assert r.json["binding"]["stage"] == "full"
    r = client.get("/v1/resolve/summarizer?key=job-1", headers=auth(CALLER))
    assert r.json["config"] == "cfg_b"
    r = client.post("/v1/bindings/summarizer/rollback", json={"reason": "bad"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200, r.json
    r = client.get("/v1/resolve/summarizer?key=job-1", headers=auth(CALLER))
    assert r.json["config"] == "cfg_a" and r.json["stage"] == "rolled_back"
    r = client.get("/v1/bindings/summarizer/history", headers=auth(OPERATOR))
    assert [e["action"] for e in r.json["entries"]] == ["rollback", "canary", "create"]
    assert r.json["entries"][0]["actor"] == "alice"
