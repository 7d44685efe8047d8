"""Each rollout draws its own bucketing (bindings.bucketing), through the operator API.

A candidate set draws a salt and the newest version; a salt or version the write
names wins; a replace that leaves them out keeps them; within a rollout they never
move (raising the share only adds units), and changing them mid-canary is a 409; a
rolled-back candidate going live again draws afresh; ROLEGATE_BUCKETING=1 keeps new
rollouts as every SDK before bucketing versions routes them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from router.app import create_app
from tests.conftest import CALLER, OPERATOR, TOKENS, auth

OP = auth(OPERATOR)
SALT = re.compile(r"^[0-9a-f]{16}$")


def _put(client: FlaskClient, body: dict[str, Any], version: int = 0,
         role: str = "summarizer") -> Any:
    headers = OP if version == 0 else {**OP, "If-Match": str(version)}
    return client.put(f"/v1/bindings/{role}", json=body, headers=headers)


def _binding(client: FlaskClient, role: str = "summarizer") -> dict[str, Any]:
    r = client.get(f"/v1/bindings/{role}", headers=auth(CALLER))
    assert r.status_code == 200, r.json
    binding: dict[str, Any] = r.json["binding"]
    return binding


def _post(client: FlaskClient, action: str, **body: Any) -> Any:
    r = client.post(f"/v1/bindings/summarizer/{action}", json={"reason": "test", **body},
                    headers=OP)
    assert r.status_code == 200, r.json
    return r.json


def test_a_candidate_set_draws_a_salt_and_the_newest_version(client: FlaskClient) -> None:
    """Create with a candidate: a 16-hex salt and version 2; without one: nothing drawn."""
    assert _put(client, {"current": "a"}, role="plain").status_code == 201
    assert _binding(client, "plain")["salt"] is None
    assert _binding(client, "plain")["bucket_version"] == 1
    assert _put(client, {"current": "a", "candidate": "b"}).status_code == 201
    first = _binding(client)
    assert SALT.match(first["salt"]) and first["bucket_version"] == 2
    assert first["bucket_by"] is None


def test_each_rollout_draws_its_own_salt_and_a_rollout_keeps_it(client: FlaskClient) -> None:
    """Shadow, every canary step and full keep the salt; the next candidate draws another."""
    _put(client, {"current": "a", "candidate": "b"})
    salt = _binding(client)["salt"]
    for _ in range(5):  # shadow, canary 0.1, 0.5, full, stable
        _post(client, "promote")
        assert _binding(client)["salt"] == salt
    record = client.get("/v1/bindings/summarizer", headers=OP).json
    assert record["binding"]["stage"] == "stable" and record["binding"]["current"] == "b"
    r = _put(client, {**record["binding"], "candidate": "c"}, record["version"])
    assert r.status_code == 200, r.json
    assert SALT.match(r.json["binding"]["salt"]) and r.json["binding"]["salt"] != salt


def test_a_salt_the_write_names_wins(client: FlaskClient) -> None:
    """A create or replace naming its salt keeps it; sending the old one back with a new
    candidate draws a fresh one (a read-modify-write names nothing)."""
    r = _put(client, {"current": "a", "candidate": "b", "salt": "team-7"})
    assert r.json["binding"]["salt"] == "team-7" and r.json["binding"]["bucket_version"] == 2
    r = _put(client, {**r.json["binding"], "candidate": "c"}, 1)
    assert r.status_code == 200 and r.json["binding"]["salt"] != "team-7"
    assert r.json["binding"]["bucket_version"] == 2
    r = _put(client, {**r.json["binding"], "candidate": "d", "salt": "next-one"}, 2)
    assert r.json["binding"]["salt"] == "next-one"


def test_a_write_of_every_field_names_nothing(client: FlaskClient) -> None:
    """`salt: null` and `bucket_version: 1`, as a client dumping the whole model writes them
    (the CLI's import and edit), draw like absent fields: a new rollout never lands on v1."""
    r = _put(client, {"current": "a", "candidate": "b", "salt": None, "bucket_version": 1,
                      "bucket_by": None})
    assert SALT.match(r.json["binding"]["salt"]) and r.json["binding"]["bucket_version"] == 2


def test_a_replace_that_leaves_bucketing_out_keeps_it(client: FlaskClient) -> None:
    """A client that predates the fields cannot reset them: absent means kept."""
    r = _put(client, {"current": "a", "candidate": "b", "bucket_by": "tenant"})
    drawn = r.json["binding"]
    r = _put(client, {"current": "a", "candidate": "b", "description": "edited"}, 1)
    assert r.status_code == 200, r.json
    kept = r.json["binding"]
    assert (kept["salt"], kept["bucket_version"], kept["bucket_by"]) == (
        drawn["salt"], drawn["bucket_version"], "tenant")


def test_bucketing_cannot_move_mid_canary(client: FlaskClient) -> None:
    """Changing salt or bucket_by while the candidate is served is a 409 naming the field, and
    nothing is written; raising the share keeps them."""
    r = _put(client, {"current": "a", "candidate": "b", "stage": "canary", "share": 0.1})
    binding = r.json["binding"]
    for field, value in (("salt", "other"), ("bucket_by", "tenant")):
        r = _put(client, {**binding, field: value}, 1)
        assert r.status_code == 409, r.json
        assert r.json["error"]["details"]["field"] == field
        assert field in r.json["error"]["message"]
    assert client.get("/v1/bindings/summarizer", headers=OP).json["version"] == 1
    r = _put(client, {**binding, "share": 0.3}, 1)
    assert r.status_code == 200 and r.json["binding"]["salt"] == binding["salt"]


def test_bad_bucketing_values_are_a_4xx_naming_the_field(client: FlaskClient) -> None:
    """A salt over 16 characters or with a NUL, an unknown version, a bad attribute name."""
    for field, value in (("salt", "x" * 17), ("salt", "a\x00b"), ("salt", ""),
                         ("bucket_version", 3), ("bucket_by", "no spaces")):
        r = _put(client, {"current": "a", "candidate": "b", field: value})
        assert 400 <= r.status_code < 500, (field, value, r.status_code)
        assert field in r.get_data(as_text=True)
    assert client.get("/v1/bindings/summarizer", headers=OP).status_code == 404


def test_a_rolled_back_candidate_going_live_again_draws_afresh(client: FlaskClient) -> None:
    """Rollback keeps the salt (for inspection); advancing the candidate again is a new rollout."""
    _put(client, {"current": "a", "candidate": "b", "stage": "canary", "share": 0.1})
    salt = _binding(client)["salt"]
    _post(client, "rollback")
    assert _binding(client)["salt"] == salt
    _post(client, "canary", share=0.2)
    again = _binding(client)
    assert again["stage"] == "canary" and SALT.match(again["salt"]) and again["salt"] != salt


@pytest.fixture
def legacy_app(redis_url: str) -> Iterator[Flask]:
    """A router with ROLEGATE_BUCKETING=1."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05, "bucketing": 1})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_rolegate_bucketing_1_keeps_new_rollouts_as_before(legacy_app: Flask) -> None:
    """New rollouts stay version 1, unsalted: what an SDK from before versions computes."""
    client = legacy_app.test_client()
    r = _put(client, {"current": "a", "candidate": "b", "stage": "canary", "share": 0.5})
    assert (r.json["binding"]["salt"], r.json["binding"]["bucket_version"]) == (None, 1)
    r = _put(client, {"current": "a", "candidate": "c", "salt": "mine"}, role="other")
    assert r.json["binding"]["salt"] == "mine"  # a named salt still wins


def test_the_environment_variable_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """ROLEGATE_BUCKETING is read from the environment; a value other than 1 or 2 stops the boot."""
    from router.server.settings import load_settings

    assert load_settings(environ={"ROLEGATE_BUCKETING": "1"}).bucketing == 1
    assert load_settings(environ={}).bucketing == 2
    with pytest.raises(ValueError, match="bucketing"):
        load_settings(environ={"ROLEGATE_BUCKETING": "3"})


def test_a_whole_model_write_keeps_the_drawn_salt(client: FlaskClient) -> None:
    """`salt: null`, `bucket_version: 1` on a replace (mid-shadow, mid-canary) keep what the
    rollout drew: no reset to unsalted, and no 409."""
    r = _put(client, {"current": "a", "candidate": "b", "stage": "shadow"})
    drawn = r.json["binding"]["salt"]
    whole = {"current": "a", "candidate": "b", "salt": None, "bucket_version": 1,
             "bucket_by": None}
    r = _put(client, {**whole, "stage": "shadow", "description": "x"}, 1)
    assert r.status_code == 200 and r.json["binding"]["salt"] == drawn
    r = _put(client, {**whole, "stage": "canary", "share": 0.1}, 2)
    assert r.status_code == 200, r.json
    assert (r.json["binding"]["salt"], r.json["binding"]["bucket_version"]) == (drawn, 2)


def test_importing_a_file_twice_changes_nothing(app: Flask) -> None:
    """`rolegate bindings import` of a file without salts: the first run creates (salts drawn),
    the second says unchanged and writes no version, the drawn salts kept."""
    import json
    import tempfile
    from pathlib import Path

    from click.testing import CliRunner

    from router.cli.main import main
    from tests.servers import werkzeug_server

    roles = {"roles": {"summarizer": {"current": "a", "candidate": "b", "stage": "canary",
                                      "share": 0.1},
                       "tenants": {"current": "a", "candidate": "b", "stage": "shadow",
                                   "bucket_by": "tenant"}}}
    with tempfile.TemporaryDirectory() as tmp, werkzeug_server(app) as url:
        path = Path(tmp) / "bindings.json"
        path.write_text(json.dumps(roles))
        env = {"ROLEGATE_URL": url, "ROLEGATE_TOKEN": OPERATOR}
        first = CliRunner().invoke(main, ["bindings", "import", str(path)], env=env)
        assert first.exit_code == 0 and first.output.count("created") == 2, first.output
        client = app.test_client()
        salts = {role: _binding(client, role)["salt"] for role in roles["roles"]}
        assert all(SALT.match(salt) for salt in salts.values())
        assert _binding(client, "tenants")["bucket_by"] == "tenant"
        second = CliRunner().invoke(main, ["bindings", "import", str(path)], env=env)
        assert second.exit_code == 0 and second.output.count("unchanged") == 2, second.output
        assert {role: _binding(client, role)["salt"] for role in roles["roles"]} == salts
        assert client.get("/v1/bindings/summarizer", headers=OP).json["version"] == 1


@pytest.mark.parametrize("version", [1, 2])
def test_each_version_splits_evenly_and_salts_draw_other_units(version: int) -> None:
    """Over 10,000 keys each version and salt gives the share within 1.5 points; two salts
    pick nearly independent canaries (overlap near share squared); raising the share within
    one salt only adds keys."""
    from rolegate.routing import bucket

    keys = [f"k{i}" for i in range(10_000)]
    canaries = []
    for salt in ("first", "second"):
        buckets = [bucket("summarizer", k, salt=salt, version=version) for k in keys]
        at = {share: {k for k, b in zip(keys, buckets, strict=True) if b < share}
              for share in (0.1, 0.5, 0.95)}
        assert all(abs(len(units) / len(keys) - share) <= 0.015 for share, units in at.items())
        assert at[0.1] <= at[0.5] <= at[0.95]
        canaries.append(at[0.1])
    overlap = len(canaries[0] & canaries[1]) / len(keys)
    assert overlap < 0.02  # independent: about 0.01; the same salt would be 0.1


def test_one_tenant_one_arm_at_every_share() -> None:
    """bucket_by tenant: every job of a tenant shares an arm at each share, and raising the
    share only moves whole tenants to the candidate."""
    from bindings.models import Binding
    from rolegate.routing import resolve

    tenants = [f"t{n}" for n in range(300)]
    previous: set[str] = set()
    for share in (0.1, 0.25, 0.5):
        binding = Binding(current="a", candidate="b", stage="canary", share=share,
                          bucket_by="tenant", salt="s1", bucket_version=2)
        chosen = set()
        for tenant in tenants:
            arms = {resolve("r", binding, 1, f"{tenant}-job-{n}",
                            attributes={"tenant": tenant})["arm"] for n in range(5)}
            assert len(arms) == 1, tenant
            if arms == {"candidate"}:
                chosen.add(tenant)
        assert previous <= chosen and 0 < len(chosen) < len(tenants)
        previous = chosen
