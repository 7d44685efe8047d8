"""The slim client snapshot (issue 38): what GET /v1/bindings gives callers, and what the SDK holds.

The default view carries what resolving reads and no gate policy; `?view=full` is
the operator's answer, record for record what GET /v1/bindings/<role> gives. A
client resolves from the slim view exactly as `rolegate.routing.resolve` does on
the full binding, counts every assignment, and holds under 2 KB per role at a
thousand roles.
"""

from __future__ import annotations

import gc
import json
import logging
import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from xxhash import xxh3_64_intdigest

from bindings.models import Binding, VersionedBinding
from rolegate.client import Client
from rolegate.fast_bucket import cut, inline_split
from rolegate.routing import BUCKET_SPACE, bucket, resolve
from router.api.client_view import client_record
from tests.conftest import CALLER, OPERATOR, auth
from tests.live import apart_from_run

OP = auth(OPERATOR)
RULES = [{"when": {"tenant": ["internal"]}, "arm": "candidate", "name": "staff"},
         {"when": {"region": ["eu"]}, "arm": "current"}]
GATE = {"invariants": {"forbidden_tools": ["rm"], "max_steps": 9},
        "thresholds": {"min_pass_rate": 0.8}}
#: Fields of the operator's record the client view leaves out.
OPERATOR_ONLY = {"steps", "paused", "approved", "description", "trace_retention"}


def _bind(client: FlaskClient, role: str, body: dict[str, Any]) -> None:
    r = client.put(f"/v1/bindings/{role}", json=body, headers=OP)
    assert r.status_code == 201, r.json


def _roles(client: FlaskClient, query: str = "") -> dict[str, Any]:
    r = client.get(f"/v1/bindings{query}", headers=auth(CALLER))
    assert r.status_code == 200, r.get_data(as_text=True)
    roles: dict[str, Any] = r.json["roles"]
    return roles


def test_the_default_view_is_what_resolving_reads(client: FlaskClient) -> None:
    """No gate policy, plan or notes; routing fields, stage start and tool rules kept."""
    _bind(client, "ruled", {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                            "share": 0.1, "rules": RULES, "gate": GATE,
                            "description": "x" * 500})
    _bind(client, "plain", {"current": "cfg_c"})
    roles = _roles(client)
    ruled, plain = roles["ruled"], roles["plain"]
    assert set(ruled) == {"role", "version", "binding"}
    binding = ruled["binding"]
    assert not OPERATOR_ONLY & set(binding)
    assert binding["gate"] == {"invariants": {"forbidden_tools": ["rm"]}}
    assert (binding["current"], binding["candidate"], binding["stage"], binding["share"]) == (
        "cfg_a", "cfg_b", "canary", 0.1)
    assert binding["stage_since"] is not None and "holdback" in binding
    assert [rule["when"] for rule in binding["rules"]] == [rule["when"] for rule in RULES]
    assert "gate" not in plain["binding"] and "rules" not in plain["binding"]
    # A role's slim record is a few hundred bytes whatever its gate policy says.
    assert len(json.dumps(plain)) < 400 and len(json.dumps(ruled)) < 600


def test_view_full_is_the_operators_record(client: FlaskClient) -> None:
    """?view=full answers every field: each record equals GET /v1/bindings/<role>."""
    _bind(client, "ruled", {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                            "share": 0.1, "rules": RULES, "gate": GATE})
    full = _roles(client, "?view=full")["ruled"]
    one = client.get("/v1/bindings/ruled", headers=OP).json
    assert full == one
    assert full["binding"]["gate"]["thresholds"]["min_pass_rate"] == 0.8
    VersionedBinding.model_validate(full)
    assert _roles(client, "?view=client") == _roles(client)


@pytest.mark.parametrize("view", ["FULL", "slim", "full ", ""])
def test_an_unknown_view_is_a_400_naming_it(client: FlaskClient, view: str) -> None:
    """A view other than client or full is refused, naming the parameter, on list and watch."""
    for path in ("/v1/bindings", "/v1/bindings/watch"):
        r = client.get(path, query_string={"view": view}, headers=auth(CALLER))
        assert r.status_code == 400, (path, r.status_code)
        assert r.json["error"]["details"]["field"] == "view"


def test_the_watch_answers_the_same_views(client: FlaskClient) -> None:
    """A watch that fires answers the slim view by default and the full one when asked."""
    _bind(client, "ruled", {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                            "share": 0.1, "gate": GATE})
    slim = client.get("/v1/bindings/watch?generation=0&timeout=0", headers=auth(CALLER))
    full = client.get("/v1/bindings/watch?generation=0&timeout=0&view=full",
                      headers=auth(CALLER))
    assert slim.json["roles"] == _roles(client)
    assert full.json["roles"] == _roles(client, "?view=full")


def _record(role: str, **binding: Any) -> VersionedBinding:
    return VersionedBinding(role=role, version=3, binding=Binding(**binding),
                            updated_at=1.0, updated_by="test")


def test_a_client_on_the_slim_view_answers_what_routing_answers() -> None:
    """Per stage and with targeting rules: Client.resolve on the slim view == resolve on the full."""
    records = {
        "canary": _record("canary", current="a", candidate="b", stage="canary", share=0.3,
                          stage_since=5.0),
        "v2": _record("v2", current="a", candidate="b", stage="canary", share=0.2,
                      salt="abc123", bucket_version=2),
        "tenant": _record("tenant", current="a", candidate="b", stage="canary", share=0.5,
                          salt="abc123", bucket_version=2, bucket_by="tenant"),
        "full": _record("full", current="a", candidate="b", stage="full", share=1.0,
                        holdback=0.1, salt="xyz", bucket_version=2),
        "shadow": _record("shadow", current="a", candidate="b", stage="shadow"),
        "stable": _record("stable", current="a"),
        "ruled": _record("ruled", current="a", candidate="b", stage="canary", share=0.5,
                         rules=RULES),
        "tools": _record("tools", current="a", gate=GATE),
    }
    snapshot = {"generation": 7, "roles": {r: client_record(rec) for r, rec in records.items()}}
    client = Client("http://127.0.0.1:9", bootstrap=snapshot, start_timeout=0,
                    subscribe=False, refresh_interval=3600.0)
    try:
        rng = random.Random(38)
        for n in range(3000):
            role = rng.choice(sorted(records))
            key = f"job-{n}-{rng.random()}"
            attributes = rng.choice([None, {"tenant": "internal"}, {"region": "eu"},
                                     {"tenant": f"t{n % 7}"}])
            got = client.resolve(role, key, attributes)
            want = resolve(role, records[role].binding, 3, key, stale=True,
                           attributes=attributes)
            assert apart_from_run(got) == dict(want), (role, key, attributes)
        assert client.allowed({"role": "tools"}, "rm") is False
        assert client.allowed({"role": "tools"}, "ls") and client.allowed({"role": "stable"}, "rm")
    finally:
        client.close(timeout=0)


def test_every_in_process_assignment_is_counted() -> None:
    """The fast path counts each resolve once per arm (and the shadow's), under the stage epoch."""
    records = {"canary": _record("canary", current="a", candidate="b", stage="canary",
                                 share=0.25, stage_since=12.5),
               "shadow": _record("shadow", current="a", candidate="b", stage="shadow")}
    snapshot = {"generation": 1, "roles": {r: client_record(rec) for r, rec in records.items()}}
    client = Client("http://127.0.0.1:9", bootstrap=snapshot, start_timeout=0,
                    subscribe=False, refresh_interval=3600.0)
    try:
        arms = {"current": 0, "candidate": 0}
        for n in range(2000):
            arms[client.resolve("canary", f"k{n}")["arm"]] += 1
            client.resolve("shadow", f"k{n}")
        rows = {(row["role"], row["arm"], row["epoch"]): row["count"]
                for row in client._exposures.drain(0.0)}
        assert rows == {("canary", "current", "12.500000"): arms["current"],
                        ("canary", "candidate", "12.500000"): arms["candidate"],
                        ("shadow", "current", "0"): 2000, ("shadow", "shadow", "0"): 2000}
        assert 400 < arms["candidate"] < 600
    finally:
        client.close(timeout=0)


@pytest.mark.parametrize("share", [0.0, 1e-12, 0.0001, 0.1, 0.5, 0.95, 1 - 2**-53])
def test_the_inlined_split_is_bucket_below_share(share: float) -> None:
    """hash < cut == (bucket(role, key, salt, version 2) < share), for random keys and at the cut."""
    split = inline_split("summarizer", "s4lt", 2, share)
    assert split is not None and inline_split("summarizer", None, 1, share) is None
    head, limit = split
    rng = random.Random(share)
    for n in range(3000):
        key = f"{n}-{rng.getrandbits(64):x}-é"
        hashed = xxh3_64_intdigest((head + key).encode())
        assert (hashed < limit) == (bucket("summarizer", key, salt="s4lt", version=2) < share)
    # The least value not below the share, and the one before it, bracket it exactly.
    assert limit == cut(share) and limit / BUCKET_SPACE >= share
    assert limit == 0 or (limit - 1) / BUCKET_SPACE < share


def test_a_client_of_a_thousand_roles_holds_under_2_kb_each(tmp_path: Path) -> None:
    """tracemalloc over loading 1,000 canary roles into a client: at most 2,048 bytes a role.

    Every config has a registered body, named in the table by its version
    (`?bodies=versions`, as the client asks): the client holds the versions, and a
    body only once a resolve of its role needs it (tests/test_body_on_demand.py).
    """
    roles = {f"role-{n}": client_record(_record(f"role-{n}", current=f"role-{n}@1",
                                                candidate=f"role-{n}@2", stage="canary",
                                                share=0.1, stage_since=1e9 + n,
                                                salt=f"salt{n}", bucket_version=2))
             for n in range(1000)}
    # A file, as a deployment bootstraps: a dict would stay referenced by client.config.
    bootstrap = tmp_path / "bindings.json"
    versions = {config: 1 for n in range(1000) for config in (f"role-{n}@1", f"role-{n}@2")}
    bootstrap.write_text(json.dumps({"generation": 1, "roles": roles,
                                     "body_versions": versions}))
    # A first client pays for imports and the SDK's own fixed state: not the roles' cost.
    warm = Client("http://127.0.0.1:9", bootstrap={"generation": 1,
                                                   "roles": {"role-0": roles["role-0"]}},
                  start_timeout=0, subscribe=False, refresh_interval=3600.0)
    warm.close(timeout=0)
    gc.collect()
    # Counted: what loading the table allocates and still holds, less log records (pytest
    # keeps every record its capture sees: the refresher's "unreachable" warnings). Other
    # tests' threads in this xdist worker allocate too, and under load more of that falls
    # in the window: 2,105 bytes a role once at load 7 a core, 1,961-2,015 otherwise.
    tracemalloc.start()
    try:
        client = Client("http://127.0.0.1:9", bootstrap=bootstrap, start_timeout=0,
                        subscribe=False, refresh_interval=3600.0)
        gc.collect()
        snapshot = tracemalloc.take_snapshot().filter_traces([
            tracemalloc.Filter(False, str(Path(logging.__file__).parent / "*")),
            tracemalloc.Filter(False, str(Path(pytest.__file__).parent.parent / "_pytest" / "*"))])
        held = sum(stat.size for stat in snapshot.statistics("filename"))
    finally:
        tracemalloc.stop()
    try:
        assert len(client.roles()) == 1000 and client.generation == 1
        assert held / 1000 <= 2048, f"{held / 1000:.0f} bytes per role"
    finally:
        client.close(timeout=0)
