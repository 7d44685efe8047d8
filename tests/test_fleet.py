"""What a fleet gets: expected false rollbacks among the live rollouts and per day, in
`rolegate status`, and the stage alpha a fleet budget asks for."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests
from click.testing import CliRunner
from flask import Flask

from gatekeeper.stats.fleet import alpha_for, outlook
from router.cli.main import main
from tests.conftest import OPERATOR, auth
from tests.servers import werkzeug_server

NOW = 2_000_000.0


def test_the_fleets_bounds_add_up() -> None:
    """Two live rollouts at 1% and 2%, one begun today: 0.03 among them, 0.01 a day so far."""
    views = [{"rollout": {"alpha": 0.01, "since": NOW - 3_600}},
             {"rollout": {"alpha": 0.02, "since": NOW - 3 * 86_400}},
             {"rollout": None}]
    fleet = outlook(views, NOW)
    assert (fleet.live, fleet.last_day) == (2, 1)
    assert fleet.live_bound == pytest.approx(0.03) and fleet.per_day == pytest.approx(0.01)
    at_pace = outlook(views, NOW, rollouts_per_day=100)
    assert at_pace.per_day == pytest.approx(2.0)  # the largest bound, 100 times a day
    assert alpha_for(0.1, 100) == pytest.approx(0.1 / 400)
    with pytest.raises(ValueError):
        alpha_for(0.0, 100)


@pytest.fixture
def live(app: Flask) -> Iterator[str]:
    """The router on a loopback port."""
    with werkzeug_server(app) as url:
        yield url


def test_status_says_what_the_fleet_gets(live: str) -> None:
    """`rolegate status` ends with the fleet's line; --fleet-budget gives the alpha to set."""
    for role in ("one", "two"):
        binding = {"current": "cfg-a", "candidate": "cfg-b", "stage": "canary", "share": 0.1,
                   "steps": [0.1, 0.5, 1.0]}
        with requests.put(f"{live}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                          timeout=5) as answer:
            assert answer.status_code == 201, answer.text
    base = ["status", "--url", live, "--token", OPERATOR]
    plain = CliRunner().invoke(main, base)
    assert plain.exit_code == 0, plain.output
    assert ("fleet: 2 rollout(s) live, each rolls back a healthy candidate with chance "
            "<= 1.00%; expected false rollbacks among them <= 0.02; at 2 rollout(s) a day, "
            "expected false rollbacks per day <= 0.02") in plain.output
    budget = CliRunner().invoke(main, [*base, "--rollouts-per-day", "100", "--fleet-budget",
                                       "0.1"])
    assert "at 100 rollout(s) a day, expected false rollbacks per day <= 1" in budget.output
    assert "needs thresholds.alpha <= 0.00025" in budget.output
    as_json = json.loads(CliRunner().invoke(main, [*base, "--json"]).output)
    assert as_json["fleet"]["live"] == 2 and as_json["fleet"]["per_rollout"] == 0.01
