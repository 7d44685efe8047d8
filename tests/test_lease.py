"""The gatekeeper lease: NX with expiry, renewed and released only by its owner."""

from __future__ import annotations

import time

import redis
from flask.testing import FlaskClient

from bindings.lease import LeaseStore
from tests.conftest import CALLER, GATEKEEPER, auth
from tests.deadlines import scaled


def test_acquire_is_exclusive_and_renewable(redis_conn: redis.Redis) -> None:
    """One holder gets the lease; another is refused; the owner renews it."""
    leases = LeaseStore(redis_conn)
    assert leases.acquire("a", 5000)
    assert not leases.acquire("b", 5000)
    assert leases.acquire("a", 9000)
    state = leases.state()
    assert state.holder == "a" and 5000 < state.ttl_ms <= 9000


def test_only_owner_releases(redis_conn: redis.Redis) -> None:
    """A non-owner's release leaves the lease alone; the owner's frees it."""
    leases = LeaseStore(redis_conn)
    leases.acquire("a", 5000)
    assert not leases.release("b")
    assert leases.state().holder == "a"
    assert leases.release("a")
    assert leases.state().holder is None
    assert leases.acquire("b", 5000)


def test_expired_lease_passes_on_and_old_owner_cannot_renew(redis_conn: redis.Redis) -> None:
    """After expiry another holder takes over, and the stale owner can neither renew nor release."""
    leases = LeaseStore(redis_conn)
    assert leases.acquire("a", 50)
    deadline = time.monotonic() + scaled(2.0)
    while leases.state().holder is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert leases.acquire("b", 5000)
    assert not leases.acquire("a", 5000)
    assert not leases.release("a")
    assert leases.state().holder == "b"


def test_lease_api(client: FlaskClient) -> None:
    """POST takes (200) or refuses (409); DELETE releases only for the holder; callers may not."""
    gk = auth(GATEKEEPER)
    first = client.post("/v1/gatekeeper/lease", json={"holder": "g1", "ttl_s": 5}, headers=gk)
    assert first.status_code == 200 and first.get_json()["held"] is True
    second = client.post("/v1/gatekeeper/lease", json={"holder": "g2", "ttl_s": 5}, headers=gk)
    assert second.status_code == 409
    assert second.get_json()["error"]["details"]["holder"] == "g1"
    assert client.get("/v1/gatekeeper/lease", headers=gk).get_json()["holder"] == "g1"
    wrong = client.delete("/v1/gatekeeper/lease", json={"holder": "g2"}, headers=gk)
    assert wrong.status_code == 409
    assert client.delete("/v1/gatekeeper/lease", json={"holder": "g1"},
                         headers=gk).status_code == 200
    assert client.post("/v1/gatekeeper/lease", json={"holder": "x"},
                       headers=auth(CALLER)).status_code == 403
    bad = client.post("/v1/gatekeeper/lease", json={"holder": "", "ttl_s": -1}, headers=gk)
    assert bad.status_code == 422
