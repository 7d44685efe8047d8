"""End to end, no simulator: an outage mid-canary, shared by both arms or the candidate's alone.

The real router (on its own Redis) and a real `rolegate gatekeeper` process;
a population resolves each job and reports its trace. Two roles are mid-canary
when an outage of 10 buckets begins: in `shared` it fails every run of both configs (the
world broke, not the candidate), in `alone` only the candidate's runs. The
gatekeeper must leave `shared` alone and roll `alone` back. The buckets the
candidate is compared with current in are shortened to 1 s so the test takes
about half a minute (the statistics are the same at any bucket length).
"""

from __future__ import annotations

import time

import pytest
import requests
from flask import Flask

from gatekeeper.stats import concurrent
from tests.conftest import OPERATOR, auth
from tests.population import Population
from tests.servers import wait_for, werkzeug_server
from tests.test_gatekeeper_e2e import _get, _stage, gatekeeper, webhook_receiver

pytestmark = pytest.mark.slow

#: The outage lasts 10 of the 1 s buckets (issue 39: 30 once; a bucket whose runs all fail
#: on both arms holds no evidence either way, whatever their number), and at least
#: OUTAGE_JOBS jobs (about 100 a second, so a loaded machine's slower population still
#: fails more than 100 runs on each arm).
OUTAGE_S = 10.0
OUTAGE_JOBS = 600
#: No power hold: it held `shared` in shadow 8-14 s (power to see a drop from cfg-a's
#: failure rate) on the way to the canary this test is about; the canary step's
#: min_seconds keeps both roles in canary through the outage.
POLICY = {"thresholds": {"min_samples": 20, "min_pass_rate": 0.9, "alpha": 0.01,
                         "min_stage_seconds": 0.2, "bake_seconds": 0.4},
          "power": None, "invariants": {"artifact_exists": ["out.md"]}}


def _create(url: str, role: str, current: str, candidate: str) -> None:
    # The canary step lasts long enough for the outage to fall inside it.
    binding = {"current": current, "candidate": candidate, "stage": "shadow", "share": 0.0,
               "steps": [{"share": 0.5, "min_seconds": OUTAGE_S + 40}, 1.0], "gate": POLICY}
    with requests.put(f"{url}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                      timeout=5) as answer:
        assert answer.status_code == 201, answer.text


def test_a_shared_outage_mid_canary_is_not_rolled_back_and_the_candidates_own_is(
        app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """10 s of every run failing: on both arms the role stays in its rollout; on the
    candidate alone it is rolled back, on evidence against concurrent current."""
    monkeypatch.setattr(concurrent, "BUCKET_S", 1)
    monkeypatch.setattr(concurrent, "GRACE_S", 1)
    with werkzeug_server(app) as url, webhook_receiver() as (hook, _events):
        _create(url, "shared", "cfg-a", "cfg-good")
        _create(url, "alone", "cfg-base", "cfg-solo")
        with gatekeeper(url, "g1", hook), \
                Population(url, ["shared", "alone"], batch=10, pause=0.05) as population:
            wait_for(lambda: _stage(url, "shared") == "canary" and _stage(url, "alone")
                     == "canary", 120, "both roles to reach canary")
            # Three buckets of healthy canary traffic, closed and in the view, before the
            # outage (polled: under load they close later than three seconds on).
            canary_from = concurrent.bucket_of(time.time())
            wait_for(lambda: _get(url, "/v1/roles/shared/gate")["concurrent"]["closed_before"]
                     >= canary_from + 3, 30, "three buckets of healthy canary traffic")
            population.failing = frozenset({"cfg-a", "cfg-good", "cfg-solo"})
            outage_from, jobs_from = time.time(), population.jobs
            wait_for(lambda: time.time() - outage_from >= OUTAGE_S
                     and population.jobs - jobs_from >= OUTAGE_JOBS, OUTAGE_S + 60,
                     "the outage's seconds and jobs")
            population.failing = frozenset()
            print(f"outage: {time.time() - outage_from:.1f} s, {population.jobs - jobs_from} "
                  "jobs")
            ended = concurrent.bucket_of(time.time())
            wait_for(lambda: _stage(url, "alone") == "rolled_back", 120,
                     "the candidate failing alone to be rolled back")
            # Every cell of the outage closed and in the view, then gatekeeper ticks.
            wait_for(lambda: _get(url, "/v1/roles/shared/gate")["concurrent"]["closed_before"]
                     > ended, 60, "the outage's cells to close")
            # The gatekeeper then ticks for a second more (about ten ticks at 0.1 s), every
            # one of them on the whole outage.
            closed_at = time.time()
            wait_for(lambda: (_get(url, "/v1/gatekeeper/heartbeat")["last_tick"] or 0.0)
                     > closed_at + 1.0, 30, "the gatekeeper to tick on the closed cells")
            shared_stage = _stage(url, "shared")
            view = _get(url, "/v1/roles/shared/gate")
            shared = _get(url, "/v1/bindings/shared/history")["entries"]
            alone = _get(url, "/v1/bindings/alone/history")["entries"]
            assert population.errors == []

    assert shared_stage == "canary", shared_stage
    failing = view["concurrent"]["metrics"]["run_failure"]
    # Both arms failed through the outage, in the same cells: no evidence either way.
    assert failing["candidate"]["events"] > 100 and failing["current"]["events"] > 100
    assert failing["log_e"] < 2.0 and view["concurrent"]["alarms"] == []
    assert "rollback" not in [e["action"] for e in shared]
    assert alone[0]["action"] == "rollback" and alone[0]["actor"] == "gatekeeper"
    assert "concurrent" in alone[0]["reason"], alone[0]["reason"]
