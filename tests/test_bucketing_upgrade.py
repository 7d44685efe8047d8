"""Old and new side by side during an upgrade: what had no bucketing version still routes as
before, a router told ROLEGATE_BUCKETING=1 keeps new rollouts where old SDKs put them, and an
SDK meeting a version it does not know serves current rather than a guess."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from rolegate import Client
from router.app import create_app
from tests.conftest import CALLER, OPERATOR, TOKENS, auth

ROLE = "summarizer"
KEYS = [f"job-{n}" for n in range(200)]


def before_versions(role: str, key: str) -> float:
    """The bucket every SDK computed before bucketing versions (BLAKE2b, unsalted, by key)."""
    digest = hashlib.blake2b(f"{role}\x00{key}".encode(), digest_size=8,
                             person=b"rolegate").digest()
    return int.from_bytes(digest, "big") / float(1 << 64)


def offline(table: dict[str, Any]) -> Client:
    """A client answering from `table` alone (nothing listens on port 9)."""
    return Client("http://127.0.0.1:9", "t", bootstrap=table, start_timeout=0,
                  subscribe=False, refresh_interval=3600.0, max_age=None)


def record(binding: dict[str, Any], role: str = ROLE) -> dict[str, Any]:
    return {"role": role, "version": 3, "binding": binding, "updated_at": 1.0,
            "updated_by": "x"}


CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.3}


def test_a_binding_without_bucketing_fields_routes_as_before() -> None:
    """A snapshot from a router older than versions (no bucket_by, salt, bucket_version):
    every key's arm is the pre-version bucket's, and the answer says version 1, unsalted."""
    client = offline({"generation": 1, "roles": {ROLE: record(CANARY)}})
    try:
        arms = set()
        for key in KEYS:
            answer = client.resolve(ROLE, key)
            expected = "candidate" if before_versions(ROLE, key) < 0.3 else "current"
            assert answer["arm"] == expected, key
            assert answer["bucketing"] == {"version": 1, "bucket_by": None, "salted": False}
            arms.add(answer["arm"])
        assert arms == {"current", "candidate"}
    finally:
        client.close()


def test_an_unknown_version_serves_current_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """A newer router's bucketing version: that role answers current for every job (logged as
    an error naming it), the answer names the version; the table's other roles route as ever."""
    table = {"generation": 1, "roles": {
        ROLE: record({**CANARY, "bucket_version": 7, "salt": "abc"}),
        "other": record(CANARY, "other")}}
    with caplog.at_level(logging.ERROR, logger="rolegate.client"):
        client = offline(table)
    try:
        assert any("bucket_version 7" in r.getMessage() for r in caplog.records)
        for key in KEYS[:50]:
            answer = client.resolve(ROLE, key, {"tenant": "x"})
            assert (answer["arm"], answer["config"], answer["stage"]) == (
                "current", "cfg_a", "canary")
            assert answer["bucketing"]["version"] == 7 and answer["bucketing"]["unit_missing"]
        assert {client.resolve("other", key)["arm"] for key in KEYS} == {"current",
                                                                         "candidate"}
    finally:
        client.close()


@pytest.fixture
def legacy_app(redis_url: str) -> Iterator[Flask]:
    """A router with ROLEGATE_BUCKETING=1."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05, "bucketing": 1})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_rolegate_bucketing_1_answers_what_an_old_sdk_computes(legacy_app: Flask) -> None:
    """A rollout begun on a router with ROLEGATE_BUCKETING=1: HTTP answers are the
    pre-version function's, key by key, so an SDK that ignores the new fields agrees."""
    http = legacy_app.test_client()
    r = http.put(f"/v1/bindings/{ROLE}", headers=auth(OPERATOR),
                 json={"current": "cfg_a", "candidate": "cfg_b"})
    assert r.status_code == 201, r.json
    assert http.post(f"/v1/bindings/{ROLE}/canary", headers=auth(OPERATOR),
                     json={"share": 0.3, "reason": "t"}).status_code == 200
    for key in KEYS:
        answer = http.get(f"/v1/resolve/{ROLE}?key={key}", headers=auth(CALLER)).json
        assert answer["arm"] == ("candidate" if before_versions(ROLE, key) < 0.3
                                 else "current"), key
