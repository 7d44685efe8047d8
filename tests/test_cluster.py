"""rolegate on a real three-master Redis Cluster: detection, every store and script, lost hints."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import requests
from flask import Flask
from flask.testing import FlaskClient
from redis.cluster import RedisCluster
from redis.crc import key_slot

from bindings.connection import RedisTarget, connect
from bindings.errors import Conflict, NotFound
from bindings.models import Binding
from bindings.store import GENERATION_KEY, ROLES_KEY, ArchiveNote, BindingStore
from router import create_app
from router.api.watch import notifier
from router.server.cache import BindingCache
from tests.cluster import OwnCluster, close_client, slot_ranges, started_cluster
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, REVIEWER, TOKENS, auth
from tests.population import trace
from tests.servers import OwnRedis, wait_for, werkzeug_server

pytestmark = pytest.mark.cluster

GATE = {"thresholds": {"min_samples": 20},
        "invariants": {"artifact_exists": ["out.md"], "forbidden_tools": ["delete_all"]},
        "drift": {"shift": 0.1, "h": 4.0}}
SPEC = {"instructions": [{"id": "tone", "text": "Be brief."}],
        "tools": [{"name": "search"}, {"name": "write"}]}


@pytest.fixture
def cluster_conn(cluster_url: str) -> Iterator[RedisCluster]:
    """A cluster client on the emptied session cluster."""
    connection = connect(RedisTarget(cluster_url))
    assert isinstance(connection, RedisCluster)
    yield connection
    close_client(connection)


@pytest.fixture
def cluster_app(cluster_url: str) -> Iterator[Flask]:
    """The router pointed at one cluster node, nothing else configured."""
    app = create_app({"redis_url": cluster_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05})
    yield app
    app.extensions["rolegate"].cache.stop()
    close_client(app.extensions["rolegate"].redis)


@pytest.fixture
def cluster_client(cluster_app: Flask) -> FlaskClient:
    """A test client of the router on the cluster."""
    return cluster_app.test_client()


def binding(**fields: Any) -> Binding:
    """A stable binding on cfg_a, with `fields` overriding."""
    return Binding.model_validate({"current": "cfg_a", **fields})


def test_a_cluster_node_url_gets_the_cluster_client(cluster_url: str, redis_url: str) -> None:
    """REDIS_URL naming a cluster node gives RedisCluster; a plain server gives redis.Redis."""
    on_cluster = connect(RedisTarget(cluster_url))
    plain = connect(RedisTarget(redis_url))
    try:
        assert isinstance(on_cluster, RedisCluster)
        assert isinstance(plain, redis.Redis)
    finally:
        close_client(on_cluster)
        plain.close()


def test_binding_store_spreads_roles_over_the_masters(
        cluster_conn: RedisCluster, redis_cluster: OwnCluster) -> None:
    """20 roles: each change is one single-slot step; no master holds more than half of them."""
    store = BindingStore(cluster_conn)
    roles = [f"role-{i:02d}" for i in range(20)]
    for role in roles:
        store.write(role, binding(), expected_version=0, actor="a", action="create", reason="r")
    store.write("role-00", binding(current="cfg_b"), expected_version=1, actor="a",
                action="replace", reason="second")
    with pytest.raises(Conflict):
        store.write("role-00", binding(), expected_version=1, actor="a", action="replace",
                    reason="stale")
    generation, records = store.snapshot()
    assert generation == 21 and sorted(records) == roles == store.roles()
    assert records["role-00"].version == 2 and records["role-00"].binding.current == "cfg_b"
    assert [e.version for e in store.history("role-00")] == [2, 1]
    per_master = []
    for index in range(3):
        node = redis_cluster.node(index)
        try:
            per_master.append(len(node.keys("rolegate:{*}:binding")))
        finally:
            node.close()
    assert sum(per_master) == 20 and max(per_master) <= 10 and min(per_master) > 0


def test_index_written_first_never_shows_a_role_without_a_binding(
        cluster_conn: RedisCluster) -> None:
    """A create that died after its index step leaves a member no reader lists as a role; a
    refused change to a role that does not exist writes nothing, not even the index."""
    store = BindingStore(cluster_conn)
    with pytest.raises(NotFound):
        store.write("ghost", binding(), expected_version=3, actor="a", action="replace",
                    reason="no such role")
    assert not cluster_conn.sismember(ROLES_KEY, "ghost")  # only creates touch the index
    cluster_conn.sadd(ROLES_KEY, "ghost")  # a create's first step, its script never ran
    assert store.roles() == [] and store.snapshot()[1] == {}


def test_a_lost_hint_is_repaired_by_the_next_full_reload(cluster_conn: RedisCluster) -> None:
    """A change whose hint failed is still answered; a full reload finds it and bumps the hint."""
    store = BindingStore(cluster_conn)
    store.write("r", binding(), expected_version=0, actor="a", action="create", reason="r")
    first = BindingCache(BindingStore(cluster_conn), interval=0.05, full_reload_interval=0.3)
    other = BindingCache(BindingStore(cluster_conn), interval=0.05, full_reload_interval=60)
    assert first.refresh() and other.refresh()

    def hint_lost(**_: Any) -> None:
        raise redis.ConnectionError("the hint's master is gone")

    store._hint = hint_lost  # type: ignore[assignment]  # the master holding the hint fails
    written = store.write("r", binding(current="cfg_b"), expected_version=1, actor="a",
                          action="replace", reason="hint lost")
    assert written.version == 2 and int(cluster_conn.get(GENERATION_KEY) or 0) == 1
    first.refresh()
    other.refresh()
    assert first.bindings["r"].version == 1 and other.bindings["r"].version == 1
    # Its full reload, once the interval passed, finds version 2 under an unchanged hint.
    wait_for(lambda: (first.refresh(), first.bindings["r"].version == 2)[1], 5,
             "the full reload to find version 2")
    assert int(cluster_conn.get(GENERATION_KEY) or 0) == 2
    other.refresh()  # an ordinary poll: the repaired hint moved
    assert other.bindings["r"].version == 2


def test_router_on_a_cluster_serves_every_store(cluster_client: FlaskClient) -> None:
    """Bindings, traces (ingest script), gate view (drift and paired scripts), configs, feedback,
    offline verdicts and the lease all work on a cluster."""
    c = cluster_client
    r = c.put("/v1/bindings/p", headers=auth(OPERATOR),
              json={"current": "cfg-a", "candidate": "cfg-bad", "stage": "shadow", "gate": GATE})
    assert r.status_code == 201, r.json
    assert c.put("/v1/bindings/q", headers=auth(OPERATOR),
                 json={"current": "cfg-a"}).status_code == 201
    for low, high in ((0, 30), (30, 60)):
        batch = [trace(role, config, arm, i, "t") for i in range(low, high)
                 for role, config, arm in (("p", "cfg-a", "current"), ("p", "cfg-bad", "shadow"),
                                           ("q", "cfg-a", "current"))]
        r = c.post("/v1/traces", headers=auth(CALLER), json={"traces": batch})
        assert r.status_code == 200 and r.json["accepted"] == 90, r.json
    again = c.post("/v1/traces", headers=auth(CALLER), json=trace("p", "cfg-a", "current", 5, "t"))
    assert again.json["results"][0]["status"] == "duplicate"
    view = c.get("/v1/roles/p/gate", headers=auth(CALLER))
    assert view.status_code == 200, view.json
    assert view.json["paired"]["pairs"] == 60
    assert view.json["drift"]["current"]["run_failure"]["n"] == 60
    tools = c.get("/v1/roles/q/tools", headers=auth(CALLER))
    assert tools.status_code == 200 and tools.json["configs"]["cfg-a"]["runs"] == 60
    r = c.put("/v1/configs/cfg-a", headers=auth(OPERATOR), json={"spec": SPEC})
    assert r.status_code == 201, r.json
    assert c.get("/v1/configs", headers=auth(CALLER)).json["configs"] == ["cfg-a"]
    r = c.post("/v1/traces/q-t-current-3/feedback", headers=auth(REVIEWER),
               json={"tier": "negative"})
    assert r.status_code == 201, r.json
    r = c.post("/v1/roles/p/offline", headers=auth(GATEKEEPER),
               json={"config": "cfg-bad", "passed": True, "reasons": [],
                     "planned_runs": 1, "completed_runs": 1})
    assert r.status_code == 201, r.json
    assert c.get("/v1/roles/p/offline/cfg-bad", headers=auth(CALLER)).status_code == 200
    lease = c.post("/v1/gatekeeper/lease", headers=auth(GATEKEEPER),
                   json={"holder": "g1", "ttl_s": 5})
    assert lease.status_code == 200 and lease.json["held"] is True
    taken = c.post("/v1/gatekeeper/lease", headers=auth(GATEKEEPER),
                   json={"holder": "g2", "ttl_s": 5})
    assert taken.status_code == 409
    assert c.delete("/v1/gatekeeper/lease", headers=auth(GATEKEEPER),
                    json={"holder": "g1"}).status_code == 200
    health = c.get("/healthz")
    assert health.status_code == 200 and health.json["status"] == "ok"
    listed = c.get("/v1/bindings", headers=auth(CALLER))
    assert sorted(listed.json["roles"]) == ["p", "q"] and listed.json["generation"] == 2


def test_tripwire_rolls_back_on_a_cluster(cluster_client: FlaskClient) -> None:
    """A forbidden tool on the canary rolls the role back inside the ingest, and resolves follow."""
    c = cluster_client
    r = c.put("/v1/bindings/t", headers=auth(OPERATOR),
              json={"current": "cfg-a", "candidate": "cfg-forbid", "gate": GATE})
    assert r.status_code == 201
    assert c.post("/v1/bindings/t/canary", headers=auth(OPERATOR),
                  json={"share": 0.5, "reason": "canary"}).status_code == 200
    bad = trace("t", "cfg-forbid", "candidate", 3, "x")
    assert "delete_all" in bad["tools"]  # type: ignore[operator]
    r = c.post("/v1/traces", headers=auth(CALLER), json=bad)
    assert r.status_code == 200 and r.json["tripwire"], r.json
    record = c.get("/v1/bindings/t", headers=auth(CALLER)).json
    assert record["binding"]["stage"] == "rolled_back"
    history = c.get("/v1/bindings/t/history", headers=auth(CALLER)).json
    assert history["entries"][0]["actor"] == "tripwire"
    assert all(c.get(f"/v1/resolve/t?key=k{i}", headers=auth(CALLER)).json["arm"] == "current"
               for i in range(20))


def test_watch_wakes_on_a_cluster(cluster_app: Flask) -> None:
    """A long-polling watch hears a change made on the cluster well before its timeout."""
    client = cluster_app.test_client()
    assert client.put("/v1/bindings/w", headers=auth(OPERATOR),
                      json={"current": "cfg-a"}).status_code == 201
    with werkzeug_server(cluster_app) as url:
        known = requests.get(f"{url}/v1/bindings", headers=auth(CALLER), timeout=5).json()
        answers: list[requests.Response] = []

        def watch() -> None:
            answers.append(requests.get(
                f"{url}/v1/bindings/watch", params={"generation": known["generation"],
                                                    "timeout": 20, "view": "full"},
                headers=auth(CALLER), timeout=30))

        waiter = threading.Thread(target=watch)
        waiter.start()
        wait_for(lambda: notifier(cluster_app).waiting == 1, 10, "the watch to wait")
        started = time.monotonic()
        r = requests.post(f"{url}/v1/bindings/w/pause", json={"reason": "hold"},
                          headers=auth(OPERATOR), timeout=5)
        assert r.status_code == 200, r.text
        waiter.join(30)
        assert time.monotonic() - started < 10
        (answer,) = answers
        assert answer.status_code == 200
        assert answer.json()["roles"]["w"]["binding"]["paused"] is True
        cluster_app.extensions["rolegate.watch"].stop()


def test_scripts_come_back_after_every_master_lost_its_script_cache(
        cluster_client: FlaskClient, redis_cluster: OwnCluster) -> None:
    """After SCRIPT FLUSH on every master, binding changes, ingest and the gate view still work."""
    c = cluster_client
    assert c.put("/v1/bindings/s", headers=auth(OPERATOR),
                 json={"current": "cfg-a", "candidate": "cfg-bad", "stage": "shadow",
                       "gate": GATE}).status_code == 201
    for index in range(3):
        node = redis_cluster.node(index)
        try:
            node.script_flush()
        finally:
            node.close()
    batch = [trace("s", config, arm, i, "f") for i in range(25)
             for config, arm in (("cfg-a", "current"), ("cfg-bad", "shadow"))]
    assert c.post("/v1/traces", headers=auth(CALLER), json={"traces": batch}).json["accepted"] == 50
    assert c.post("/v1/traces", headers=auth(CALLER),
                  json=trace("s", "cfg-a", "current", 99, "f")).status_code == 200
    assert c.post("/v1/bindings/s/pause", headers=auth(OPERATOR),
                  json={"reason": "after flush"}).status_code == 200
    view = c.get("/v1/roles/s/gate", headers=auth(CALLER))
    assert view.status_code == 200 and view.json["paired"]["pairs"] == 25


def test_min_replicas_without_replicas_answers_outcome_unknown(cluster_url: str) -> None:
    """ROLEGATE_MIN_REPLICAS=1 on masters with no replica: 504, change kept on the primary.

    Not a 503: a 503 means "not applied", and this change is applied; whether it
    survives a failover is unknown, so it is `outcome_unknown`, the condition
    named in the details.
    """
    app = create_app({"redis_url": cluster_url, "tokens": TOKENS, "testing": True,
                      "min_replicas": 1, "replica_wait_ms": 50})
    try:
        c = app.test_client()
        r = c.put("/v1/bindings/m", headers=auth(OPERATOR), json={"current": "cfg-a"})
        assert r.status_code == 504 and r.json["error"]["code"] == "outcome_unknown"
        details = r.json["error"]["details"]
        assert details["condition"] == "replication_timeout"
        assert (details["replicas"], details["required"], details["version"]) == (0, 1, 1)
        assert c.get("/v1/bindings/m", headers=auth(CALLER)).json["version"] == 1
    finally:
        app.extensions["rolegate"].cache.stop()
        close_client(app.extensions["rolegate"].redis)


def test_run_id_ttl_comes_from_the_setting(cluster_url: str) -> None:
    """ROLEGATE_RUN_ID_TTL sets how long a run id stays known (the sizing's memory lever)."""
    app = create_app({"redis_url": cluster_url, "tokens": TOKENS, "testing": True,
                      "run_id_ttl_s": 120})
    try:
        c = app.test_client()
        assert c.put("/v1/bindings/ttl", headers=auth(OPERATOR),
                     json={"current": "cfg-a"}).status_code == 201
        assert c.post("/v1/traces", headers=auth(CALLER),
                      json=trace("ttl", "cfg-a", "current", 1, "t")).status_code == 200
        connection = app.extensions["rolegate"].redis
        assert 60 < connection.ttl("rolegate:{ttl}:claims:ttl-t-current-1") <= 120
    finally:
        app.extensions["rolegate"].cache.stop()
        close_client(app.extensions["rolegate"].redis)


def test_a_full_redis_answers_503_not_500() -> None:
    """At maxmemory under noeviction a write is refused with 503 store_unavailable, not a 500."""
    server = OwnRedis(persist=False)
    server.start()
    app = create_app({"redis_url": server.url, "tokens": TOKENS, "testing": True})
    try:
        c = app.test_client()
        admin = redis.Redis.from_url(server.url)
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", "1")
        r = c.put("/v1/bindings/full", headers=auth(OPERATOR), json={"current": "cfg-a"})
        assert r.status_code == 503 and r.json["error"]["code"] == "store_unavailable"
        assert "Redis is full" in r.json["error"]["message"]
        admin.close()
    finally:
        app.extensions["rolegate"].cache.stop()
        close_client(app.extensions["rolegate"].redis)
        server.close()


@pytest.mark.slow
def test_healthz_fails_when_one_master_is_down() -> None:
    """/healthz pings every master of a cluster: one killed master makes it 503 (its roles are out)."""
    own = started_cluster()
    app = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True})
    try:
        c = app.test_client()
        assert c.get("/healthz").status_code == 200
        own.procs[-1].kill()
        own.procs[-1].wait(10)
        health = c.get("/healthz", headers=auth(CALLER))
        assert health.status_code == 503 and health.json["checks"]["redis"]["ok"] is False
    finally:
        app.extensions["rolegate"].cache.stop()
        close_client(app.extensions["rolegate"].redis)
        own.close()


def test_healthz_after_a_failover_reads_the_slot_map_again() -> None:
    """A master dies and its replica takes over: /healthz pings the masters as the cluster
    now has them (not the dead one the client last knew) and answers 200 at once; before
    the failover it answers 503 at once, not after the cluster client's retries."""
    own = started_cluster()
    app = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True})
    try:
        own.add_replica(of=2)
        c = app.test_client()
        assert c.get("/healthz").status_code == 200
        own.procs[2].kill()
        own.procs[2].wait(10)
        started = time.monotonic()
        assert c.get("/healthz").status_code == 503
        assert time.monotonic() - started < 3  # the cluster client's own PING took 4-10 s
        dead, seed = own.ports[2], own.node(0)
        try:
            # The node rolegate was told about serves the new map once it has heard.
            # Each entry: [first slot, last slot, [host, port, id, ...], replicas...].
            wait_for(lambda: all(entry[2][1] != dead
                                 for entry in seed.execute_command("CLUSTER SLOTS"))
                     or None, 30, "the replica to take over", interval=0.1)
        finally:
            seed.close()
        started = time.monotonic()
        health = c.get("/healthz", headers=auth(CALLER))
        assert health.status_code == 200, health.json
        assert time.monotonic() - started < 3
    finally:
        app.extensions["rolegate"].cache.stop()
        close_client(app.extensions["rolegate"].redis)
        own.close()


def test_a_lost_archive_hint_is_repaired_too(cluster_conn: RedisCluster) -> None:
    """A role archived while its hint failed leaves every router's table after a full reload."""
    store = BindingStore(cluster_conn)
    store.write("gone", binding(), expected_version=0, actor="a", action="create", reason="r")
    cache = BindingCache(BindingStore(cluster_conn), interval=0.05, full_reload_interval=0.3)
    assert cache.refresh() and "gone" in cache.bindings

    def hint_lost(**_: Any) -> None:
        raise redis.ConnectionError("the hint's master is gone")

    store._hint = hint_lost  # type: ignore[assignment]
    note = ArchiveNote(reason="retired", actor="a", time=time.time(), version=2)
    store.write("gone", binding(), expected_version=1, actor="a", action="archive",
                reason="retired", archive=note)
    cache.refresh()
    assert "gone" in cache.bindings  # the hint never moved
    wait_for(lambda: (cache.refresh(), "gone" not in cache.bindings)[1], 5,
             "the full reload to drop the archived role")
    assert "gone" not in cache.bindings and int(cluster_conn.get(GENERATION_KEY) or 0) == 2


def _role_on(master: int, masters: int, prefix: str) -> str:
    """A role name whose keys hash to the slots of `master`."""
    slots = slot_ranges(masters)[master]
    return next(f"{prefix}{n}" for n in range(10_000)
                if key_slot(f"{prefix}{n}".encode()) in slots)


@pytest.mark.slow
def test_losing_the_master_of_the_role_index_refuses_only_its_own_roles() -> None:
    """With the master holding rolegate:roles down, roles on the other masters still change;
    only the lost master's own roles answer 503 (docs/scaling.md)."""
    own = started_cluster()
    index_master = next(i for i, slots in enumerate(slot_ranges(len(own.ports)))
                        if key_slot(ROLES_KEY.encode()) in slots)
    for i in range(len(own.ports)):
        node = own.node(i)
        node.config_set("cluster-require-full-coverage", "no")  # the others keep serving
        node.close()
    app = create_app({"redis_url": own.url, "tokens": TOKENS, "testing": True})
    try:
        c = app.test_client()
        roles = {i: _role_on(i, len(own.ports), f"m{i}-") for i in range(len(own.ports))}
        for role in roles.values():
            assert c.put(f"/v1/bindings/{role}", json={"current": "cfg_a"},
                         headers=auth(OPERATOR)).status_code == 201
        own.procs[index_master].kill()
        own.procs[index_master].wait(10)
        for i, role in roles.items():
            r = c.post(f"/v1/bindings/{role}/pause", json={"reason": "hold"},
                       headers=auth(OPERATOR))
            if i == index_master:
                assert r.status_code == 503, r.json
            else:
                assert r.status_code == 200, r.json
                assert r.json["version"] == 2 and r.json["binding"]["paused"] is True
    finally:
        app.extensions["rolegate"].cache.stop()
        close_client(app.extensions["rolegate"].redis)
        own.close()
