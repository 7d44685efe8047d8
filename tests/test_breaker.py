"""A hung Redis: once a command times out, requests needing Redis fail fast, then recover."""

from __future__ import annotations

from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.servers import hung, router_on_own_redis, wait_for

CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.1}


def test_hung_redis_opens_the_circuit_and_a_probe_closes_it() -> None:
    """After one timeout, reads and writes answer 503 'circuit open' at once; resumed, all works."""
    with router_on_own_redis(TOKENS) as (own, client):
        assert client.put("/v1/bindings/summarizer", json=CANARY,
                          headers=auth(OPERATOR)).status_code == 201
        with hung(own):
            # The first command to time out opens the circuit: this request's, or the
            # worker's binding poller's if it met the hung Redis first.
            first = client.get("/v1/bindings/summarizer", headers=auth(OPERATOR))
            assert first.status_code == 503
            for _ in range(3):
                read = client.get("/v1/bindings/summarizer", headers=auth(OPERATOR))
                assert read.status_code == 503
                assert "circuit open" in read.json["error"]["message"]
                write = client.post("/v1/bindings/summarizer/pause", json={"reason": "x"},
                                    headers=auth(OPERATOR))
                assert write.status_code == 503  # not 504: nothing was sent
                assert "nothing was sent" in write.json["error"]["message"]
            resolve = client.get("/v1/resolve/summarizer?key=k", headers=auth(CALLER))
            assert resolve.status_code == 200  # resolves never needed Redis
        wait_for(lambda: client.get("/v1/bindings/summarizer",
                                    headers=auth(OPERATOR)).status_code == 200 or None,
                 10, "the circuit to close once Redis answers")
        r = client.post("/v1/bindings/summarizer/pause", json={"reason": "x"},
                        headers=auth(OPERATOR))
        assert r.status_code == 200 and r.json["version"] == 2
