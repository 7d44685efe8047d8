"""What a fleet gets: expected false rollbacks among the live rollouts and per day, in
`rolegate status` and GET /v1/fleet, and what a fleet budget (`--fleet-budget`, or the
router's ROLEGATE_FLEET_BUDGET) asks of each rollout."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import requests
from click.testing import CliRunner
from flask import Flask
from pydantic import ValidationError

from gatekeeper.stats.fleet import alpha_for, outlook
from gatekeeper.stats.fleet_budget import budget_advice
from router import create_app
from router.cli.main import main
from router.server.settings import load_settings
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
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


def test_a_fleet_budget_gives_each_rollout_a_share_and_names_who_is_over() -> None:
    """0.02 a day over 2 rollouts: a share of 0.01 each; the 2% rollout is over and is told
    the alpha that brings it within."""
    views = [{"role": "one", "rollout": {"alpha": 0.01, "since": NOW - 3_600},
              "policy": {"thresholds": {"alpha": 0.0025}}},
             {"role": "two", "rollout": {"alpha": 0.02, "since": NOW - 60},
              "policy": {"thresholds": {"alpha": 0.005}}}]
    advice = budget_advice(views, outlook(views, NOW), 0.02)
    assert advice.pace == 2 and advice.per_rollout == pytest.approx(0.01)
    assert advice.alpha == pytest.approx(0.02 / (2 * 4))
    assert [o.role for o in advice.over] == ["two"]
    assert advice.over[0].suggested == pytest.approx(0.0025)
    assert "over budget: two (thresholds.alpha 0.005" in "\n".join(advice.lines())
    assert advice.as_dict()["applied"] is False
    # No rollout begun in the last day: the pace is still at least the live ones, and one.
    assert budget_advice([], outlook([], NOW), 0.1).pace == 1


@pytest.fixture
def budgeted(redis_url: str) -> Iterator[str]:
    """A router with ROLEGATE_FLEET_BUDGET 0.005 and two live rollouts at the default 1%."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "fleet_budget": "0.005"})
    with werkzeug_server(app) as url:
        for role in ("one", "two"):
            binding = {"current": "cfg-a", "candidate": "cfg-b", "stage": "canary",
                       "share": 0.1}
            with requests.put(f"{url}/v1/bindings/{role}", json=binding,
                              headers=auth(OPERATOR), timeout=5) as answer:
                assert answer.status_code == 201, answer.text
        yield url
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


def test_the_routers_budget_is_on_v1_fleet_and_in_status(budgeted: str) -> None:
    """GET /v1/fleet and `rolegate status` say what the router's budget asks: both default
    rollouts (1% each) are over a 0.0025 share."""
    with requests.get(f"{budgeted}/v1/fleet", headers=auth(CALLER), timeout=5) as answer:
        assert answer.status_code == 200, answer.text
        fleet = answer.json()
    assert fleet["fleet"]["live"] == 2 and fleet["text"].startswith("fleet: 2 rollout(s) live")
    budget = fleet["budget"]
    assert budget["source"] == "ROLEGATE_FLEET_BUDGET" and budget["applied"] is False
    assert budget["per_rollout"] == pytest.approx(0.0025)
    assert [o["role"] for o in budget["over"]] == ["one", "two"]
    assert budget["over"][0]["suggested_alpha"] == pytest.approx(0.000625)
    out = CliRunner().invoke(main, ["status", "--url", budgeted, "--token", OPERATOR]).output
    assert ("fleet budget (ROLEGATE_FLEET_BUDGET): 0.005 false rollback(s) a day at 2 "
            "rollout(s) a day needs thresholds.alpha <= 0.000625") in out, out
    assert "over budget: one (thresholds.alpha 0.0025, rollout bound 0.01): set " \
           "thresholds.alpha <= 0.000625" in out
    # --fleet-budget asks about another budget than the router's.
    asked = CliRunner().invoke(main, ["status", "--url", budgeted, "--token", OPERATOR,
                                      "--fleet-budget", "1"]).output
    assert "fleet budget (--fleet-budget): 1 false" in asked
    assert "every live rollout is within its share of the budget" in asked


def test_a_role_limited_token_sees_only_its_roles_in_the_fleet(budgeted: str,
                                                               redis_url: str) -> None:
    """The fleet over the token's roles: a token for `one` never hears of `two`."""
    limited = create_app({"redis_url": redis_url,
                          "tokens": "reader=tok-one:caller:one", "testing": True,
                          "fleet_budget": "0.005"})
    fleet = limited.test_client().get("/v1/fleet", headers=auth("tok-one")).json
    assert [r["role"] for r in fleet["roles"]] == ["one"]
    assert "two" not in str(fleet)
    limited.extensions["rolegate"].cache.stop()
    limited.extensions["rolegate"].redis.close()


@pytest.mark.parametrize("value", ["0", "-1", "lots", "nan"])
def test_a_bad_fleet_budget_stops_the_boot_naming_it(value: str) -> None:
    """ROLEGATE_FLEET_BUDGET must be a positive number: anything else is refused at boot."""
    with pytest.raises(ValidationError, match="fleet_budget"):
        load_settings(environ={"ROLEGATE_FLEET_BUDGET": value})
    assert load_settings(environ={"ROLEGATE_FLEET_BUDGET": "0.1"}).fleet_budget == 0.1
