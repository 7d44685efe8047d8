"""Targeting before the hash: rules pick the arm from job attributes, the same on both sides."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient
from pydantic import ValidationError

from bindings.models import Binding
from rolegate.client import Client
from rolegate.recorder import Recorder
from rolegate.routing import resolve
from router.api.resolve import resolve_role
from router.cli.main import main
from tests.conftest import CALLER, OPERATOR, auth
from tests.live import (
    LiveRouter,
    apart_from_run,
    put_role,
    router,  # noqa: F401  (the pytest fixture the tests below take)
)

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
RULES = [{"when": {"tenant": ["internal", "staff"]}, "arm": "candidate", "name": "dogfood"},
         {"when": {"region": ["eu"]}, "arm": "current"}]
GATE = {"thresholds": {"min_samples": 5, "min_pass_rate": 0.8},
        "invariants": {"forbidden_tools": ["web_write"], "max_steps": 2}}


def _binding(stage: str = "canary", share: float = 0.5) -> Binding:
    return Binding.model_validate({"current": "cfg_a", "candidate": "cfg_b", "stage": stage,
                                   "share": share, "rules": RULES})


def test_a_matching_rule_picks_the_arm_whatever_the_bucket() -> None:
    """Internal jobs go to the candidate and EU jobs stay on current, for every key."""
    binding = _binding(share=0.01)
    for n in range(200):
        internal = resolve("r", binding, 1, f"k{n}", attributes={"tenant": "internal"})
        assert internal["arm"] == "candidate" and internal["rule"] == "dogfood"
        assert internal["attributes"] == {"tenant": "internal"}
    full = _binding("full", 1.0)
    eu = resolve("r", full, 1, "k", attributes={"region": "eu", "plan": "pro"})
    assert eu["arm"] == "current" and eu["rule"] == "1"
    assert eu["attributes"] == {"region": "eu"}


def test_first_matching_rule_wins_and_others_are_bucketed() -> None:
    """An internal EU job takes the first rule; a job no rule matches is bucketed as before."""
    binding = _binding()
    both = resolve("r", binding, 1, "k", attributes={"tenant": "staff", "region": "eu"})
    assert both["arm"] == "candidate" and both["rule"] == "dogfood"
    plain = Binding.model_validate({**binding.model_dump(), "rules": []})
    for n in range(200):
        other = resolve("r", binding, 1, f"k{n}", attributes={"tenant": "acme"})
        assert "rule" not in other
        assert other == resolve("r", plain, 1, f"k{n}")


@pytest.mark.parametrize("stage", ["shadow", "stable", "rolled_back"])
def test_rules_act_only_while_a_canary_or_full_stage_is_live(stage: str) -> None:
    """In shadow, stable or rolled back every job is on current: a rollback is never overridden."""
    binding = _binding(stage, 0.0)
    answer = resolve("r", binding, 1, "k", attributes={"tenant": "internal"})
    assert answer["arm"] == "current" and "rule" not in answer


@pytest.mark.parametrize(("rules", "field"), [
    ([{"when": {}, "arm": "candidate"}], "when"),
    ([{"when": {"tenant": []}, "arm": "candidate"}], "tenant"),
    ([{"when": {"ten ant": ["x"]}, "arm": "candidate"}], "attribute name"),
    ([{"when": {"t": ["x"]}, "arm": "shadow"}], "arm"),
    ([{"when": {"t": ["x"]}, "arm": "current", "name": "a"},
      {"when": {"t": ["y"]}, "arm": "current", "name": "a"}], "unique"),
])
def test_bad_rules_are_refused(rules: list[dict[str, Any]], field: str) -> None:
    """An empty `when`, an empty value list, a bad name, an unknown arm, a repeated name."""
    with pytest.raises(ValidationError, match=field):
        Binding.model_validate({"current": "a", "rules": rules})


def _create(client: FlaskClient) -> None:
    body = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.1,
            "rules": RULES, "gate": GATE}
    r = client.put("/v1/bindings/summarizer", json=body, headers=auth(OPERATOR))
    assert r.status_code == 201, r.json


def test_resolve_reads_attributes_from_attr_parameters(client: FlaskClient) -> None:
    """?attr.tenant=internal sends the job to the candidate and names the rule."""
    _create(client)
    r = client.get("/v1/resolve/summarizer?key=k1&attr.tenant=internal", headers=auth(CALLER))
    assert r.status_code == 200
    assert r.json["arm"] == "candidate" and r.json["config"] == "cfg_b"
    assert r.json["rule"] == "dogfood" and r.json["attributes"] == {"tenant": "internal"}
    plain = client.get("/v1/resolve/summarizer?key=k1", headers=auth(CALLER)).json
    assert "rule" not in plain


@pytest.mark.parametrize("query", ["attr.ten%20ant=x", "attr.tenant=a&attr.tenant=b",
                                   "attr.tenant=" + "x" * 201,
                                   "&".join(f"attr.a{n}=1" for n in range(11))])
def test_bad_attributes_are_a_400_naming_them(client: FlaskClient, query: str) -> None:
    """A bad attribute name, a repeated one, a long value or too many: 400."""
    _create(client)
    r = client.get(f"/v1/resolve/summarizer?key=k&{query}", headers=auth(CALLER))
    assert r.status_code == 400 and "attr" in r.json["error"]["message"]


def test_client_and_router_answer_the_same_with_attributes(router: LiveRouter,  # noqa: F811
                                                           app: Flask) -> None:
    """client.resolve(attributes=) equals the router's ?attr. answer, key by key."""
    put_role(router, "summarizer", current="cfg_a", candidate="cfg_b", stage="canary",
             share=0.3, rules=RULES)
    tenants = [None, "internal", "acme"]
    regions = [None, "eu", "us"]
    with Client(router.url, CALLER, refresh_interval=0.05) as client:
        for n, tenant, region in itertools.product(range(60), tenants, regions):
            attributes = {k: v for k, v in (("tenant", tenant), ("region", region)) if v}
            query = "".join(f"&attr.{k}={v}" for k, v in attributes.items())
            with app.test_request_context(f"/v1/resolve/summarizer?key=k{n}{query}",
                                          headers=auth(CALLER)):
                expected = resolve_role(role="summarizer").get_json()
            assert apart_from_run(client.resolve("summarizer", f"k{n}", attributes=attributes)) == \
                apart_from_run(expected)


def test_traces_record_the_rule_and_the_gate_reads_per_rule(client: FlaskClient) -> None:
    """Runs the rule routed carry it; ?rule= judges only them, so one tenant's failure shows."""
    _create(client)
    traces = []
    for n in range(12):
        tenant = "internal" if n < 6 else "acme"
        answer = client.get(f"/v1/resolve/summarizer?key=j{n}&attr.tenant={tenant}",
                            headers=auth(CALLER)).json
        run = Recorder(answer, STAMPS, run_id=f"run-{n}")
        # Internal runs take too many steps (a failure, not a tripwire); the others pass.
        for _ in range(3 if tenant == "internal" else 1):
            run.tool("read")
        run.output("done")
        traces.append(run.finish().model_dump(mode="json", exclude_none=True))
    assert traces[0]["rule"] == "dogfood" and traces[0]["attributes"] == {"tenant": "internal"}
    assert "rule" not in traces[7]
    r = client.post("/v1/traces", json={"traces": traces}, headers=auth(CALLER))
    assert r.status_code in (200, 207), r.json
    by_rule = client.get("/v1/roles/summarizer/gate?rule=dogfood", headers=auth(CALLER)).json
    assert by_rule["rule"]["id"] == "dogfood"
    assert by_rule["arms"]["candidate"]["n"] == 6
    assert by_rule["arms"]["candidate"]["passes"] == 0
    assert by_rule["arms"]["current"]["n"] == 0
    view = client.get("/v1/roles/summarizer/gate", headers=auth(CALLER)).json
    assert view["stage"] == "canary"  # a failure, not a tripwire: the stage still runs
    missing = client.get("/v1/roles/summarizer/gate?rule=ghost", headers=auth(CALLER))
    assert missing.status_code == 404 and missing.json["error"]["details"]["rules"] == [
        "1", "dogfood"]


def test_cli_resolve_passes_attributes(router: LiveRouter) -> None:  # noqa: F811
    """`rolegate resolve ROLE --key K --attr tenant=internal` answers as the rule says."""
    put_role(router, "summarizer", current="cfg_a", candidate="cfg_b", stage="canary",
             share=0.01, rules=RULES)
    env = {"ROLEGATE_URL": router.url, "ROLEGATE_TOKEN": CALLER, "ROLEGATE_RETRY_NO_WAIT": "1"}
    result = CliRunner().invoke(main, ["resolve", "summarizer", "--key", "k1", "--attr",
                                       "tenant=internal"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["arm"] == "candidate" and answer["rule"] == "dogfood"
    bad = CliRunner().invoke(main, ["resolve", "summarizer", "--attr", "tenant"], env=env)
    assert bad.exit_code == 2
