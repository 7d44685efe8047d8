"""End to end: real Redis, a live router, gatekeeper processes and an agent population.

A healthy candidate walks shadow -> canary steps -> full -> stable with no human;
a 10-point regression is rolled back; a forbidden call rolls back at once; killing
the leader hands the lease to the other gatekeeper, and no move is applied twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import IO, Any

import pytest
import redis
import requests
from flask import Flask

from bindings.lease import LeaseStore
from tests.conftest import GATEKEEPER, OPERATOR, auth
from tests.population import Population
from tests.servers import ROOT, base_env, json_receiver, wait_for, werkzeug_server

pytestmark = pytest.mark.slow

LEASE_TTL = 1.0
#: Leaders killed at most, each taken over by a fresh standby, until one failover is in time.
FAILOVERS = 3
POLICY = {"thresholds": {"min_samples": 20, "min_pass_rate": 0.9, "alpha": 0.01,
                         "min_stage_seconds": 0.2, "bake_seconds": 0.4},
          "invariants": {"artifact_exists": ["out.md"], "forbidden_tools": ["delete_all"]}}


@contextmanager
def webhook_receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback HTTP server that keeps every JSON body POSTed to it."""
    with json_receiver() as (url, events):
        yield url, events


@contextmanager
def gatekeeper(url: str, holder: str, webhook: str) -> Iterator[subprocess.Popen[bytes]]:
    """`rolegate gatekeeper` as its own process; SIGTERM (then SIGKILL) when done."""
    log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115  # closed in the finally below
    argv = [sys.executable, "-m", "router.cli", "gatekeeper", "--interval", "0.1",
            "--lease-ttl", str(LEASE_TTL), "--holder", holder, "--webhook", webhook, "-v"]
    env = base_env(ROLEGATE_URL=url, ROLEGATE_TOKEN=GATEKEEPER, ROLEGATE_RETRY_NO_WAIT="1")
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.seek(0)
        output = log.read().decode(errors="replace")
        log.close()
        if os.environ.get("ROLEGATE_TEST_VERBOSE"):
            print(f"--- gatekeeper {holder} ---\n{output[-6000:]}")


def _create(url: str, role: str, candidate: str) -> None:
    binding = {"current": "cfg-a", "candidate": candidate, "stage": "shadow", "share": 0.0,
               "steps": [0.3, 0.6, 1.0], "gate": POLICY}
    with requests.put(f"{url}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                      timeout=5) as answer:
        assert answer.status_code == 201, answer.text


def _get(url: str, path: str) -> Any:
    # A generous read timeout: the router shares its process with the population and,
    # under -n on a loaded machine, a gate view may take seconds; slow is not wrong here.
    with requests.get(f"{url}{path}", headers=auth(GATEKEEPER), timeout=30) as answer:
        answer.raise_for_status()
        return answer.json()


def _stage(url: str, role: str) -> str:
    return str(_get(url, f"/v1/bindings/{role}")["binding"]["stage"])


def _standing_by(url: str, holder: str) -> bool:
    """Whether `holder` has ticked as a standby (its heartbeat says it does not lead)."""
    holders = _get(url, "/v1/gatekeeper/heartbeat")["holders"]
    return any(h["holder"] == holder and not h["leader"] for h in holders)


def _failover(leases: LeaseStore, leader: subprocess.Popen[bytes], standby: str) -> float:
    """Kill the leader (no chance to release its lease); seconds until `standby` holds it.

    The lease is read from Redis itself, so the router's answer time on a busy
    machine is not counted as the gatekeepers' failover.
    """
    leader.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: leases.state().holder == standby, LEASE_TTL + 20,
             f"{standby} to take over the lease", interval=0.005)
    return time.monotonic() - killed


@pytest.mark.usefixtures("quick_buckets")
def test_autonomous_rollouts_and_leader_failover(app: Flask, redis_conn: redis.Redis) -> None:
    """Healthy -> stable, regressed and forbidden -> rolled back, leader killed -> taken over."""
    leases = LeaseStore(redis_conn)
    with werkzeug_server(app) as url, webhook_receiver() as (hook, events):
        for role, candidate in (("healthy", "cfg-good"), ("regressed", "cfg-bad"),
                                ("forbidden", "cfg-forbid")):
            _create(url, role, candidate)
        with ExitStack() as gatekeepers:
            leader = gatekeepers.enter_context(gatekeeper(url, "g1", hook))
            wait_for(lambda: _get(url, "/v1/gatekeeper/lease")["holder"] == "g1", 20,
                     "g1 to take the lease")
            standby = gatekeepers.enter_context(gatekeeper(url, "g2", hook))
            with Population(url, ["healthy", "regressed", "forbidden"]) as population:
                wait_for(lambda: _stage(url, "forbidden") == "rolled_back", 10,
                         "the forbidden call to roll back")
                wait_for(lambda: _stage(url, "regressed") == "rolled_back", 10,
                         "the regressed candidate to roll back")
                # Webhooks are delivered in the background, within moments.
                wait_for(lambda: {"regressed", "forbidden"} <= {
                    e["role"] for e in list(events) if e["kind"] == "rollback"}, 5,
                    "the rollback webhook events")
                # Kill the leader mid-rollout: the standby takes over within the lease's
                # TTL and a second. A loaded machine may deschedule one standby for longer;
                # then the measurement is taken again (a fresh standby, the new leader
                # killed), up to FAILOVERS times: one failover in time keeps the promise.
                wait_for(lambda: _stage(url, "healthy") in ("canary", "full"), 10,
                         "healthy to reach canary")
                wait_for(lambda: _standing_by(url, "g2"), 20, "g2 to stand by")
                took_over = [_failover(leases, leader, "g2")]
                for spare in range(3, FAILOVERS + 2):
                    if min(took_over) <= LEASE_TTL + 1.0:
                        break
                    leader, holder = standby, f"g{spare}"
                    standby = gatekeepers.enter_context(gatekeeper(url, holder, hook))
                    wait_for(lambda h=holder: _standing_by(url, h), 20, f"{holder} to stand by")
                    took_over.append(_failover(leases, leader, holder))
                wait_for(lambda: _stage(url, "healthy") == "stable", 20, "healthy to stable")
                assert population.errors == []
            # SIGTERM: the current tick finishes, the lease is released, exit 0.
            standby.send_signal(signal.SIGTERM)
            assert standby.wait(10) == 0
            assert _get(url, "/v1/gatekeeper/lease")["holder"] is None

        assert min(took_over) <= LEASE_TTL + 1.0, took_over
        healthy = _get(url, "/v1/bindings/healthy")["binding"]
        assert healthy["current"] == "cfg-good" and healthy["candidate"] is None
        entries = list(reversed(_get(url, "/v1/bindings/healthy/history")["entries"]))
        walk = [(e["action"], e["binding"]["stage"], e["binding"]["share"]) for e in entries]
        # Exactly one move per step, by gatekeepers only: nothing applied twice.
        assert walk == [("create", "shadow", 0.0), ("promote", "canary", 0.3),
                        ("promote", "canary", 0.6), ("promote", "full", 1.0),
                        ("promote", "stable", 0.0)]
        assert {e["actor"] for e in entries[1:]} == {"gatekeeper"}
        assert all("gate passed" in e["reason"] for e in entries[1:])

        regressed = _get(url, "/v1/bindings/regressed/history")["entries"]
        assert [e["action"] for e in regressed] == ["rollback", "create"]
        assert regressed[0]["actor"] == "gatekeeper"
        assert "sequential evidence" in regressed[0]["reason"]
        forbidden = _get(url, "/v1/bindings/forbidden/history")["entries"]
        assert [e["action"] for e in forbidden] == ["rollback", "create"]
        assert "delete_all" in json.dumps(forbidden[0])
        assert forbidden[0]["actor"] in ("tripwire", "gatekeeper")

        kinds = {(e["kind"], e["role"]) for e in events}
        assert ("stage_change", "healthy") in kinds
        assert ("rollback", "forbidden") in kinds  # the tripwire's, relayed by the gatekeeper
