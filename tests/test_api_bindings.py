"""The operator API: create, replace with If-Match, rollout moves, history, and every refusal."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth

OP = auth(OPERATOR)
CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.1}


def _create(client: FlaskClient, body: dict[str, Any] | None = None,
            role: str = "summarizer") -> None:
    r = client.put(f"/v1/bindings/{role}", json=body or CANARY, headers=OP)
    assert r.status_code == 201, r.json


def _error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.get_data(as_text=True))
    error: dict[str, Any] = response.json["error"]
    assert set(error) == {"code", "message", "details"} and error["message"]
    return error


def test_get_answers_version_and_etag(client: FlaskClient) -> None:
    """GET one binding answers its version, also as the ETag."""
    _create(client)
    r = client.get("/v1/bindings/summarizer", headers=auth(CALLER))
    assert r.status_code == 200 and r.json["version"] == 1
    assert r.headers["ETag"] == '"1"'
    assert r.json["binding"]["share"] == 0.1


def test_list_answers_every_role(client: FlaskClient) -> None:
    """GET /v1/bindings lists every role with its record."""
    _create(client)
    _create(client, {"current": "x"}, role="other")
    r = client.get("/v1/bindings", headers=OP)
    assert sorted(r.json["roles"]) == ["other", "summarizer"]


def test_replace_needs_if_match(client: FlaskClient) -> None:
    """Replacing without If-Match is 428; a stale If-Match is 409 with the current version."""
    _create(client)
    _error(client.put("/v1/bindings/summarizer", json=CANARY, headers=OP), 428)
    r = client.put("/v1/bindings/summarizer", json={**CANARY, "share": 0.2},
                   headers={**OP, "If-Match": '"1"'})
    assert r.status_code == 200 and r.json["version"] == 2
    error = _error(client.put("/v1/bindings/summarizer", json=CANARY,
                              headers={**OP, "If-Match": "1"}), 409)
    assert error["details"]["current_version"] == 2


def test_put_with_reason_records_it(client: FlaskClient) -> None:
    """PUT {"binding", "reason"} records the reason and the token's name in history."""
    client.put("/v1/bindings/summarizer", json={"binding": CANARY, "reason": "new prompt"},
               headers=OP)
    entry = client.get("/v1/bindings/summarizer/history", headers=OP).json["entries"][0]
    assert (entry["reason"], entry["actor"], entry["action"]) == ("new prompt", "alice", "create")


@pytest.mark.parametrize("body, field", [
    ({"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 1.5}, "share"),
    ({"current": "cfg_a", "stage": "canary", "share": 0.5}, "candidate"),
    ({"current": "cfg_a", "steps": [0.5, 0.2]}, "steps"),
    ({"current": "cfg_a", "stage": "half"}, "stage"),
    ({"current": "cfg_a", "colour": "blue"}, "colour"),
    ({"current": 7}, "current"),
    ({"current": "cfg_a", "share": "lots"}, "share"),
    ({"current": "cfg_a", "paused": "maybe"}, "paused"),
    ({"binding": {"current": "cfg_a"}, "reason": "r", "extra": 1}, "extra"),
])
def test_bad_bindings_are_422_naming_the_field(client: FlaskClient, body: dict[str, Any],
                                               field: str) -> None:
    """Each inconsistent or mistyped binding is a 422 whose message names the field."""
    error = _error(client.put("/v1/bindings/summarizer", json=body, headers=OP), 422)
    assert field in error["message"]
    assert client.get("/v1/bindings/summarizer", headers=OP).status_code == 404


@pytest.mark.parametrize("data", [b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_malformed_json_is_400(client: FlaskClient, data: bytes) -> None:
    """A body that is not a JSON object is a 400 that says so."""
    r = client.put("/v1/bindings/summarizer", data=data, headers={**OP,
                   "Content-Type": "application/json"})
    _error(r, 400)


def test_oversized_body_is_413(app: Flask) -> None:
    """A body over the size limit is a JSON 413 and nothing is written."""
    client = app.test_client()
    limit = app.config["MAX_CONTENT_LENGTH"]
    data = b'{"current": "' + b"a" * limit + b'"}'
    _error(client.put("/v1/bindings/summarizer", data=data,
                      headers={**OP, "Content-Type": "application/json"}), 413)
    assert client.get("/v1/bindings/summarizer", headers=OP).status_code == 404


def test_unknown_role_is_404(client: FlaskClient) -> None:
    """Reading, moving or resolving a role that does not exist is a 404."""
    _error(client.get("/v1/bindings/ghost", headers=OP), 404)
    _error(client.get("/v1/bindings/ghost/history", headers=OP), 404)
    _error(client.post("/v1/bindings/ghost/promote", json={"reason": "r"}, headers=OP), 404)
    _error(client.get("/v1/resolve/ghost?key=k", headers=auth(CALLER)), 404)


def test_bad_role_name_is_400(client: FlaskClient) -> None:
    """A role name that cannot be a key is refused before anything is read."""
    _error(client.put("/v1/bindings/bad%20name", json=CANARY, headers=OP), 400)


@pytest.mark.parametrize("share", [0, -0.5, 1.01, "half"])
def test_bad_canary_share_is_422(client: FlaskClient, share: Any) -> None:
    """A canary share outside (0, 1] or not a number is a 422 naming share."""
    _create(client)
    error = _error(client.post("/v1/bindings/summarizer/canary",
                               json={"share": share, "reason": "r"}, headers=OP), 422)
    assert "share" in error["message"]


def test_moves_need_a_reason(client: FlaskClient) -> None:
    """promote, pause, resume and rollback without a reason are 422."""
    _create(client)
    for move in ("promote", "pause", "resume", "rollback"):
        _error(client.post(f"/v1/bindings/summarizer/{move}", json={}, headers=OP), 422)


def test_auth_missing_unknown_and_wrong_scope(client: FlaskClient) -> None:
    """No token or an unknown one is 401; a caller token on an operator call is 403."""
    _create(client)
    _error(client.get("/v1/bindings"), 401)
    _error(client.get("/v1/bindings", headers=auth("nope")), 401)
    _error(client.get("/v1/bindings", headers={"Authorization": "Basic x"}), 401)
    _error(client.put("/v1/bindings/summarizer", json=CANARY, headers=auth(CALLER)), 403)
    _error(client.post("/v1/bindings/summarizer/canary", json={"share": 0.5, "reason": "r"},
                       headers=auth(GATEKEEPER)), 403)
    assert client.post("/v1/bindings/summarizer/promote", json={"reason": "gate passed"},
                       headers=auth(GATEKEEPER)).status_code == 200


def test_rollback_zeroes_the_canary_keeping_the_candidate(client: FlaskClient) -> None:
    """Rollback without to_version: stage rolled_back, share 0, candidate kept."""
    _create(client)
    r = client.post("/v1/bindings/summarizer/rollback", json={"reason": "pass rate fell"},
                    headers=OP)
    assert r.status_code == 200
    binding = r.json["binding"]
    assert (binding["stage"], binding["share"], binding["candidate"]) == ("rolled_back", 0, "cfg_b")
    assert r.json["version"] == 2


def test_rollback_to_version_restores_it_as_a_new_version(client: FlaskClient) -> None:
    """Rollback with to_version writes that version's binding as a new version."""
    _create(client)
    client.post("/v1/bindings/summarizer/canary", json={"share": 0.5, "reason": "r"}, headers=OP)
    r = client.post("/v1/bindings/summarizer/rollback", json={"reason": "undo", "to_version": 1},
                    headers=OP)
    assert r.json["version"] == 3 and r.json["binding"]["share"] == 0.1
    entries = client.get("/v1/bindings/summarizer/history", headers=OP).json["entries"]
    assert [e["action"] for e in entries] == ["restore", "canary", "create"]
    _error(client.post("/v1/bindings/summarizer/rollback",
                       json={"reason": "undo", "to_version": 9}, headers=OP), 404)


def test_promote_walks_the_ladder_and_pause_resume_flip(client: FlaskClient) -> None:
    """promote climbs the steps to full then stable; pause and resume flip the flag once."""
    _create(client, {**CANARY, "steps": [0.1, 0.5, 1.0]})
    stages = []
    for _ in range(3):
        r = client.post("/v1/bindings/summarizer/promote", json={"reason": "ok"}, headers=OP)
        stages.append((r.json["binding"]["stage"], r.json["binding"]["share"]))
    assert stages == [("canary", 0.5), ("full", 1.0), ("stable", 0.0)]
    assert client.post("/v1/bindings/summarizer/pause", json={"reason": "freeze"},
                       headers=OP).json["binding"]["paused"] is True
    _error(client.post("/v1/bindings/summarizer/pause", json={"reason": "again"}, headers=OP), 409)
    assert client.post("/v1/bindings/summarizer/resume", json={"reason": "thaw"},
                       headers=OP).json["binding"]["paused"] is False


def test_illegal_move_is_409_and_changes_nothing(client: FlaskClient) -> None:
    """Rolling back a stable role is refused with 409 and no new version."""
    _create(client, {"current": "cfg_a"})
    _error(client.post("/v1/bindings/summarizer/rollback", json={"reason": "r"}, headers=OP), 409)
    assert client.get("/v1/bindings/summarizer", headers=OP).json["version"] == 1


def test_move_with_stale_if_match_is_409(client: FlaskClient) -> None:
    """A move sent with an If-Match that is no longer current is a 409."""
    _create(client)
    client.post("/v1/bindings/summarizer/canary", json={"share": 0.2, "reason": "r"}, headers=OP)
    _error(client.post("/v1/bindings/summarizer/canary", json={"share": 0.3, "reason": "r"},
                       headers={**OP, "If-Match": "1"}), 409)


def test_history_is_newest_first_and_pages(client: FlaskClient) -> None:
    """History lists every change newest first; limit and bad limits behave."""
    _create(client)
    for share in (0.2, 0.3, 0.4):
        client.post("/v1/bindings/summarizer/canary", json={"share": share, "reason": "r"},
                    headers=OP)
    r = client.get("/v1/bindings/summarizer/history?limit=2", headers=OP)
    assert [e["version"] for e in r.json["entries"]] == [4, 3]
    _error(client.get("/v1/bindings/summarizer/history?limit=x", headers=OP), 400)


def test_unknown_path_and_method_are_json(client: FlaskClient) -> None:
    """Werkzeug's 404 and 405 come back in the JSON error shape."""
    _error(client.get("/v1/nothing-here", headers=OP), 404)
    _error(client.patch("/v1/bindings/summarizer", headers=OP), 405)


def test_healthz_says_up_to_anyone_and_details_to_a_token(client: FlaskClient) -> None:
    """/healthz: only the status without a token; with one, checks, a fresh worker's copy ok."""
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json == {"status": "ok"}
    r = client.get("/healthz", headers=auth(CALLER))
    assert r.status_code == 200 and r.json["checks"]["redis"]["ok"] is True
    # This worker never served a resolve: its copy is loaded for the check, not reported -1.
    assert r.json["checks"]["bindings"]["ok"] is True
    assert r.json["checks"]["bindings"]["generation"] >= 0
    assert client.get("/healthz", headers=auth("not-a-token")).json == {"status": "ok"}


def test_two_http_writers_racing_on_one_version_one_wins_one_409(app: Flask) -> None:
    """Two PUTs sent at once with the same If-Match: exactly one 200, the other 409."""
    _create(app.test_client())

    def put(description: str, version: int, barrier: threading.Barrier,
            statuses: list[int]) -> None:
        client = app.test_client()
        barrier.wait()
        r = client.put("/v1/bindings/summarizer", json={**CANARY, "description": description},
                       headers={**OP, "If-Match": str(version)})
        statuses.append(r.status_code)

    for version in range(1, 11):
        barrier = threading.Barrier(2)
        statuses: list[int] = []
        threads = [threading.Thread(target=put, args=(name, version, barrier, statuses))
                   for name in ("x", "y")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(statuses) == [200, 409], statuses
    history = app.test_client().get("/v1/bindings/summarizer/history", headers=OP).json
    assert len(history["entries"]) == 11


@pytest.mark.parametrize("body", [
    b'{"current": "cfg_a", "gate": {"drift": {"baseline": {"pass_rate": NaN}}}}',
    b'{"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": NaN}',
    b'{"current": "cfg_a", "gate": {"thresholds": {"max_mean_cost_usd": Infinity}}}',
])
def test_nan_and_infinity_are_refused_and_nothing_is_stored(client: FlaskClient,
                                                            body: bytes) -> None:
    """NaN or Infinity anywhere in a binding is a 422, never a stored unreadable record."""
    _error(client.put("/v1/bindings/summarizer", data=body,
                      headers={**OP, "Content-Type": "application/json"}), 422)
    _error(client.get("/v1/bindings/summarizer", headers=OP), 404)
    assert client.get("/v1/bindings", headers=OP).status_code == 200
