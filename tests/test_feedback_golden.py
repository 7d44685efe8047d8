"""Feedback on stored runs, the golden sample endpoint, and `rolegate golden build` end to end."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from gatekeeper.checks.spec import Spec
from gatekeeper.store.configs import ConfigStore, config_key
from gatekeeper.suite.scenario import load_suite
from router.cli import main
from tests.conftest import CALLER, OPERATOR, REVIEWER, auth

DAY = 86400.0
STAMPS = {"agent_version": "1", "instruction_hash": "h", "model_id": "m", "tool_schema_hash": "t"}
SPEC = {"output_schema": {"type": "object", "required": ["decision"],
                          "properties": {"decision": {"type": "string"}}},
        "tools": [{"name": "lookupOrder", "required": True}, {"name": "verifyIdentity"}]}


def report(client: FlaskClient, run_id: str, age_days: float, *, config: str = "cfg_a",
           output: str = '{"decision": "refund"}', role: str = "refunds") -> None:
    """Ingest one trace made `age_days` ago."""
    trace = {"run_id": run_id, "role": role, "config": config, "arm": "current",
             "tools": ["lookupOrder"], "output_text": output, "stamps": STAMPS,
             "input": {"task": f"Handle refund request {run_id}", "amount": 40,
                       "files": {"ticket.txt": f"ticket {run_id}"}},
             "time": time.time() - age_days * DAY}
    r = client.post("/v1/traces", json=trace, headers=auth(CALLER))
    assert r.status_code == 200, r.json


def feedback(client: FlaskClient, run_id: str, **body: Any) -> Any:
    """POST feedback on a run as a reviewer."""
    return client.post(f"/v1/traces/{run_id}/feedback", json=body, headers=auth(REVIEWER))


@pytest.fixture
def refunds(client: FlaskClient, redis_conn: redis.Redis) -> FlaskClient:
    """A refunds role on cfg_a whose spec was registered ten days ago, and some traffic."""
    r = client.put("/v1/bindings/refunds", json={"current": "cfg_a"}, headers=auth(OPERATOR))
    assert r.status_code == 201, r.json
    ConfigStore(redis_conn, clock=lambda: time.time() - 10 * DAY).put(
        "cfg_a", Spec.model_validate(SPEC), actor="alice")
    for i in range(6):
        report(client, f"routine-{i}", 5)
    report(client, "fresh", 0.1)
    report(client, "wrong", 4, output='{"decision": "refund"}')
    report(client, "liked", 4)
    report(client, "disputed", 4)
    report(client, "before-policy", 12)
    return client


def test_feedback_is_recorded_with_tier_reviewer_and_correction(refunds: FlaskClient) -> None:
    """A negative with a correction is stored as negative_corrected, reviewer defaulting to the token."""
    r = feedback(refunds, "wrong", tier="negative", correction={"decision": "deny"})
    assert r.status_code == 201, r.json
    assert r.json["role"] == "refunds" and r.json["tier"] == "negative_corrected"
    entry = r.json["feedback"][0]
    assert entry["correction"] == {"decision": "deny"} and entry["reviewer"] == "ann"
    r = refunds.get("/v1/traces/wrong/feedback", headers=auth(CALLER))
    assert r.status_code == 200 and len(r.json["feedback"]) == 1


def test_feedback_is_a_reviewers_act(refunds: FlaskClient) -> None:
    """A caller token (what every agent holds) may read feedback but not write it: 403."""
    r = refunds.post("/v1/traces/wrong/feedback", json={"tier": "positive"},
                     headers=auth(CALLER))
    assert r.status_code == 403 and "reviewer" in r.json["error"]["message"]
    assert refunds.get("/v1/traces/wrong/feedback", headers=auth(CALLER)).json["feedback"] == []


def test_bad_feedback_is_a_clear_4xx(refunds: FlaskClient) -> None:
    """Unknown runs are 404, unknown tiers and a correction on positive are 422."""
    assert feedback(refunds, "nope", tier="positive").status_code == 404
    assert feedback(refunds, "liked", tier="great").status_code == 422
    r = feedback(refunds, "liked", tier="positive", correction={"decision": "deny"})
    assert r.status_code == 422 and "correction" in r.json["error"]["message"]
    bad_role = feedback(refunds, "liked", tier="positive", role="bad role!")
    assert bad_role.status_code == 422
    assert bad_role.json["error"]["details"]["errors"][0]["field"] == "role"
    assert refunds.get("/v1/traces/liked/feedback", headers=auth(CALLER)).json["feedback"] == []


def test_run_id_known_to_two_roles_needs_the_role(refunds: FlaskClient) -> None:
    """The same run id under two roles is a 409 until the body names the role."""
    refunds.put("/v1/bindings/billing", json={"current": "cfg_z"}, headers=auth(OPERATOR))
    report(refunds, "liked", 4, config="cfg_z", role="billing")
    assert feedback(refunds, "liked", tier="positive").status_code == 409
    r = feedback(refunds, "liked", tier="positive", role="billing")
    assert r.status_code == 201 and r.json["role"] == "billing"


def test_golden_endpoint_samples_tiers_under_the_current_policy(refunds: FlaskClient) -> None:
    """Quotas cap routine traffic, fresh and pre-policy cases stay out, conflicts are flagged."""
    feedback(refunds, "wrong", tier="negative", correction={"decision": "deny"})
    feedback(refunds, "liked", tier="positive")
    feedback(refunds, "disputed", tier="positive", reviewer="ann")
    feedback(refunds, "disputed", tier="negative", reviewer="bob")
    r = refunds.get("/v1/roles/refunds/golden?min_age=86400&quota=no_feedback:3",
                    headers=auth(CALLER))
    assert r.status_code == 200, r.json
    tiers = {c["run_id"]: c["tier"] for c in r.json["cases"]}
    assert tiers["wrong"] == "negative_corrected" and tiers["liked"] == "positive"
    assert sum(1 for t in tiers.values() if t == "no_feedback") == 3
    assert "fresh" not in tiers and "before-policy" not in tiers and "disputed" not in tiers
    assert r.json["excluded"]["too_recent"] == 1
    assert [f["run_id"] for f in r.json["flagged"]] == ["disputed"]
    wrong = next(c for c in r.json["cases"] if c["run_id"] == "wrong")
    assert wrong["reference"] == {"decision": "deny"}
    assert [c["key"] for c in r.json["criteria"]][:1] == ["output:/decision"]
    assert refunds.get("/v1/roles/refunds/golden?quota=bogus:1",
                       headers=auth(CALLER)).status_code == 400


@pytest.fixture
def server(app: Flask) -> Iterator[str]:
    """The app served on a free loopback port."""
    httpd = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.port}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def test_golden_build_writes_a_loadable_suite(refunds: FlaskClient, server: str,
                                              tmp_path: Path) -> None:
    """The CLI writes scenarios the suite loads, with the correction as reference and a review list."""
    feedback(refunds, "wrong", tier="negative", correction={"decision": "deny"})
    feedback(refunds, "disputed", tier="positive", reviewer="ann")
    feedback(refunds, "disputed", tier="negative", reviewer="bob")
    out = tmp_path / "golden"
    env = {"ROLEGATE_URL": server, "ROLEGATE_TOKEN": CALLER}
    result = CliRunner().invoke(main, ["golden", "build", "refunds", "--out", str(out),
                                       "--min-age", "86400", "--quota", "no_feedback=2"],
                                env=env)
    assert result.exit_code == 0, result.output
    assert "1 cases need a human" in result.output
    suite = load_suite(out)
    assert len(suite.scenarios) == 3
    manifest = json.loads((out / "golden.json").read_text())
    wrong = next(c for c in manifest["cases"] if c["run_id"] == "wrong")
    scenario = next(s for s in suite.scenarios if s.id == wrong["scenario"])
    assert json.loads(scenario.expected or "") == {"decision": "deny"}
    assert scenario.task == "Handle refund request wrong"
    assert (out / scenario.seed_files["ticket.txt"]).read_text() == "ticket wrong"
    assert "disputed" in (out / "REVIEW.md").read_text()
    assert json.loads((out / "criteria.json").read_text())["config"] == "cfg_a"
    again = CliRunner().invoke(main, ["golden", "build", "refunds", "--out", str(out)], env=env)
    assert again.exit_code == 1 and "--force" in again.output


def test_criteria_generate_registers_spec_and_shows_diff(refunds: FlaskClient, server: str,
                                                         tmp_path: Path) -> None:
    """`criteria generate` stores a candidate's criteria and lists what changes against current."""
    refunds.put("/v1/bindings/refunds", json={"current": "cfg_a", "candidate": "cfg_b"},
                headers={**auth(OPERATOR), "If-Match": "1"})
    spec = dict(SPEC, tools=[{"name": "lookupOrder", "required": True},
                             {"name": "verifyIdentity", "required": True}])
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    env = {"ROLEGATE_URL": server, "ROLEGATE_TOKEN": OPERATOR}
    result = CliRunner().invoke(main, ["criteria", "generate", "refunds", "--spec", str(path)],
                                env=env)
    assert result.exit_code == 0, result.output
    assert "cfg_b: 4 criteria" in result.output
    assert "+ tool:verifyIdentity" in result.output
    result = CliRunner().invoke(main, ["criteria", "generate", "refunds", "--config", "nope"],
                                env=env)
    assert result.exit_code == 1 and "no spec registered" in result.output


def test_criteria_generate_restores_criteria_from_the_stored_spec(
        refunds: FlaskClient, server: str, redis_conn: redis.Redis) -> None:
    """Without --spec, criteria that differ from what the stored spec generates are regenerated."""
    raw = json.loads(redis_conn.hget(config_key("cfg_a"), "record"))
    raw["criteria"] = raw["criteria"][:1]  # as an older generator might have left them
    redis_conn.hset(config_key("cfg_a"), "record", json.dumps(raw))
    env = {"ROLEGATE_URL": server, "ROLEGATE_TOKEN": OPERATOR}
    result = CliRunner().invoke(main, ["criteria", "generate", "refunds"], env=env)
    assert result.exit_code == 0, result.output
    assert "cfg_a: 3 criteria (version 2)" in result.output
    again = CliRunner().invoke(main, ["criteria", "generate", "refunds"], env=env)
    assert "cfg_a: 3 criteria (version 2)" in again.output
