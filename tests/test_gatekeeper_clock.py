"""Stage ages come from one clock (Redis TIME through the router), never the gatekeeper's own."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests
from flask import Flask

from gatekeeper.loop import Gatekeeper
from gatekeeper.machine.decide import Action
from rolegate.http import ApiClient
from tests.conftest import GATEKEEPER, OPERATOR, auth
from tests.population import Population
from tests.servers import werkzeug_server

HOUR = 3600.0
POLICY = {"thresholds": {"min_samples": 20, "min_pass_rate": 0.9, "alpha": 0.01,
                         "min_stage_seconds": HOUR, "bake_seconds": 0.0},
          "invariants": {"artifact_exists": ["out.md"]}}


@pytest.fixture
def live(app: Flask) -> Iterator[str]:
    """The router on a loopback port."""
    with werkzeug_server(app) as url:
        yield url


def _create(url: str, role: str) -> dict[str, object]:
    binding = {"current": "cfg-a", "candidate": "cfg-good", "stage": "canary", "share": 0.5,
               "steps": [0.5, 1.0], "gate": POLICY}
    with requests.put(f"{url}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                      timeout=5) as answer:
        assert answer.status_code == 201, answer.text
        created: dict[str, object] = answer.json()
        return created


def test_a_gatekeeper_two_hours_ahead_does_not_promote_a_one_hour_stage(live: str) -> None:
    """The loop's own clock skewed +2 h: the healthy 3,600 s canary is held, not advanced."""
    _create(live, "skewed")
    Population(live, ["skewed"], batch=60).step()
    api = ApiClient(live, GATEKEEPER, attempts=2)
    try:
        keeper = Gatekeeper(api, interval=1.0, clock=lambda: time.time() + 2 * HOUR)
        decisions = keeper.once()
        keeper.release()
        binding = api.get("/v1/bindings/skewed")["binding"]
    finally:
        api.close()
    (decision,) = decisions
    assert decision.action is Action.HOLD, decision.reason
    assert decision.details["required_s"] == HOUR and decision.details["elapsed_s"] < 600.0
    assert binding["stage"] == "canary" and binding["share"] == 0.5
