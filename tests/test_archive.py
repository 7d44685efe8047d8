"""Archiving a role (DELETE /v1/bindings/<role>) and restoring it: 410s, history kept."""

from __future__ import annotations

from typing import Any

import redis
from flask import Flask
from flask.testing import FlaskClient

from bindings.store import ROLES_KEY
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth

OP = auth(OPERATOR)
CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.1}


def _create(client: FlaskClient, role: str = "summarizer") -> None:
    r = client.put(f"/v1/bindings/{role}", json=CANARY, headers=OP)
    assert r.status_code == 201, r.json


def _archive(client: FlaskClient, reason: str = "role retired") -> Any:
    return client.delete("/v1/bindings/summarizer", json={"reason": reason}, headers=OP)


def test_archived_role_answers_410_with_the_reason(client: FlaskClient) -> None:
    """After DELETE, resolve and read answer 410 naming who archived it and why."""
    _create(client)
    assert client.get("/v1/resolve/summarizer?key=k", headers=auth(CALLER)).status_code == 200
    r = _archive(client, "replaced by the triage agent")
    assert r.status_code == 200 and r.json["version"] == 2
    assert r.json["archived"]["reason"] == "replaced by the triage agent"
    for path in ("/v1/resolve/summarizer?key=k", "/v1/bindings/summarizer"):
        gone = client.get(path, headers=auth(CALLER))
        assert gone.status_code == 410, path
        error = gone.json["error"]
        assert error["code"] == "archived"
        assert error["details"]["reason"] == "replaced by the triage agent"
        assert error["details"]["archived_by"] == "alice"


def test_archived_role_leaves_the_table_but_keeps_its_history(client: FlaskClient) -> None:
    """An archived role is not listed, and its history reads as before plus the archive."""
    _create(client)
    _create(client, "other")
    _archive(client)
    assert sorted(client.get("/v1/bindings", headers=OP).json["roles"]) == ["other"]
    history = client.get("/v1/bindings/summarizer/history", headers=auth(CALLER))
    assert history.status_code == 200
    assert [e["action"] for e in history.json["entries"]] == ["archive", "create"]
    assert history.json["entries"][0]["reason"] == "role retired"


def test_archived_role_refuses_moves_and_replacement(client: FlaskClient) -> None:
    """Moves, a PUT and a second archive all answer 410 and write nothing."""
    _create(client)
    _archive(client)
    assert client.post("/v1/bindings/summarizer/pause", json={"reason": "x"},
                       headers=OP).status_code == 410
    assert client.put("/v1/bindings/summarizer", json=CANARY,
                      headers={**OP, "If-Match": "2"}).status_code == 410
    assert _archive(client).status_code == 410
    history = client.get("/v1/bindings/summarizer/history", headers=OP).json["entries"]
    assert len(history) == 2


def test_restore_brings_the_role_back_as_a_new_version(client: FlaskClient) -> None:
    """POST .../restore puts the last binding back in the table; resolves work again."""
    _create(client)
    _archive(client)
    r = client.post("/v1/bindings/summarizer/restore", json={"reason": "needed after all"},
                    headers=OP)
    assert r.status_code == 200 and r.json["version"] == 3
    assert r.json["binding"]["share"] == 0.1
    assert client.get("/v1/resolve/summarizer?key=k", headers=auth(CALLER)).status_code == 200
    assert "summarizer" in client.get("/v1/bindings", headers=OP).json["roles"]
    actions = [e["action"] for e in
               client.get("/v1/bindings/summarizer/history", headers=OP).json["entries"]]
    assert actions == ["unarchive", "archive", "create"]
    again = client.post("/v1/bindings/summarizer/restore", json={"reason": "twice"},
                        headers=OP)
    assert again.status_code == 409


def test_archive_refusals(client: FlaskClient) -> None:
    """No reason is 422, a caller or gatekeeper token 403, an unknown role 404, stale 409."""
    _create(client)
    assert client.delete("/v1/bindings/summarizer", headers=OP).status_code == 422
    assert client.delete("/v1/bindings/summarizer", json={"reason": "x"},
                         headers=auth(GATEKEEPER)).status_code == 403
    assert client.delete("/v1/bindings/ghost", json={"reason": "x"},
                         headers=OP).status_code == 404
    stale = client.delete("/v1/bindings/summarizer", json={"reason": "x"},
                          headers={**OP, "If-Match": "7"})
    assert stale.status_code == 409 and stale.json["error"]["details"]["current_version"] == 1
    by_query = client.delete("/v1/bindings/summarizer?reason=done", headers=OP)
    assert by_query.status_code == 200 and by_query.json["archived"]["reason"] == "done"


def test_an_archived_role_stays_out_even_if_the_index_still_lists_it(
        app: Flask, client: FlaskClient, redis_conn: redis.Redis) -> None:
    """The role index is only a hint: an archived role in it is still not in the table."""
    _create(client)
    _archive(client)
    redis_conn.sadd(ROLES_KEY, "summarizer")  # as if the removal after the archive was lost
    store = app.extensions["rolegate"].store
    assert "summarizer" not in store.snapshot()[1]
    assert store.roles() == []
