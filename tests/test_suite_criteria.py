"""From production traces to a golden suite to a comparison that names the lost criterion."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from bindings.models import GatePolicy
from gatekeeper.checks.spec import Spec
from gatekeeper.store.configs import ConfigStore
from gatekeeper.suite.compare import compare_results
from gatekeeper.suite.records import RunOptions
from gatekeeper.suite.report import (
    comparison_html,
    comparison_markdown,
    result_html,
    result_markdown,
)
from gatekeeper.suite.runner import SuiteRunner
from gatekeeper.suite.scenario import load_config, load_suite
from gatekeeper.suite.verdict import SuiteResult, evaluate_run
from router.cli import main
from tests.conftest import CALLER, OPERATOR, REVIEWER, auth

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "refunds"
AGENT = f"{sys.executable} {EXAMPLE / 'agent.py'}"
STAMPS = {"agent_version": "1", "instruction_hash": "h", "model_id": "m", "tool_schema_hash": "t"}
DAY = 86400.0
#: (run id, amount): three of the six requests are over the 1000 escalation threshold.
JOBS = [("r1", 40.0), ("r2", 2500.0), ("r3", 300.0), ("r4", 1800.0), ("r5", 90.0),
        ("r6", 4000.0)]


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


def production(client: FlaskClient, redis_conn: redis.Redis) -> None:
    """The refunds role on refunds_v1 with a week of traffic and one corrected case."""
    r = client.put("/v1/bindings/refunds", json={"current": "refunds_v1"},
                   headers=auth(OPERATOR))
    assert r.status_code == 201, r.json
    spec = json.loads((EXAMPLE / "spec.json").read_text())
    ConfigStore(redis_conn, clock=lambda: time.time() - 30 * DAY).put(
        "refunds_v1", Spec.model_validate(spec), actor="alice")
    for run_id, amount in JOBS:
        tools = ["read_file", "lookupOrder"] + (["verifyIdentity"] if amount > 1000 else [])
        output = {"decision": "refund", "customer": {"id": f"cust-{run_id}"}, "amount": amount}
        trace = {"run_id": run_id, "role": "refunds", "config": "refunds_v1", "arm": "current",
                 "tools": tools, "output_text": json.dumps(output), "stamps": STAMPS,
                 "input": {"task": f"Decide refund request {run_id}", "order": f"o-{run_id}",
                           "customer": f"cust-{run_id}", "amount": amount},
                 "time": time.time() - 7 * DAY}
        assert client.post("/v1/traces", json=trace, headers=auth(CALLER)).status_code == 200
    correction = {"decision": "escalate", "customer": {"id": "cust-r6"}, "amount": 4000.0}
    r = client.post("/v1/traces/r6/feedback", headers=auth(REVIEWER),
                    json={"tier": "negative", "correction": correction, "reviewer": "rita"})
    assert r.status_code == 201, r.json


def run_suite(root: Path, config: str) -> SuiteResult:
    """Run the golden suite once per scenario with one of the example configs."""
    suite = load_suite(root)
    cfg = load_config(EXAMPLE / "configs" / f"{config}.json")
    run = SuiteRunner(suite, cfg, AGENT, RunOptions(repeats=1, parallel=2), progress=None).run()
    return evaluate_run(run, GatePolicy(), AGENT)


def test_candidate_losing_a_policy_step_is_named_by_its_criterion(
        client: FlaskClient, redis_conn: redis.Redis, server: str, tmp_path: Path) -> None:
    """A golden suite built from traffic shows the fast candidate losing escalation:high-value."""
    production(client, redis_conn)
    out = tmp_path / "golden"
    result = CliRunner().invoke(main, [
        "golden", "build", "refunds", "--out", str(out), "--min-age", "0", "--repeats", "1",
        "--tools", str(EXAMPLE / "tools.json")],
        env={"ROLEGATE_URL": server, "ROLEGATE_TOKEN": CALLER})
    assert result.exit_code == 0, result.output
    assert len(load_suite(out).scenarios) == 6

    base, cand = run_suite(out, "refunds_v1"), run_suite(out, "refunds_v2_fast")
    comparison = compare_results(base, cand)
    found = comparison.by_criterion["regressions"]
    assert [r["key"] for r in found] == ["escalation:high-value"]
    assert found[0]["lost"] == 3
    assert found[0]["message"] == "3 cases lost the verifyIdentity call"
    assert any("escalation:high-value" in w for w in comparison.warnings)
    rates = comparison.by_criterion["rates"]
    assert rates["refunds_v1"]["escalation:high-value"]["rate"] == 1.0
    assert rates["refunds_v2_fast"]["escalation:high-value"]["rate"] == 0.0
    assert rates["refunds_v2_fast"]["tool:lookupOrder"]["rate"] == 1.0
    # The corrected case is scored against the correction, and both configs miss it.
    assert rates["refunds_v1"]["reference"]["failed"] == 1
    assert rates["refunds_v1"]["reference"]["passed"] == 5
    text = comparison_markdown(comparison)
    assert "## Regressions by criterion" in text and "lost the verifyIdentity call" in text
    assert "| `escalation:high-value` | 100% (3/3) | 0% (0/3) |" in text
    assert "## By criterion" in result_markdown(cand)
    html = comparison_html(comparison)
    assert "<h2>By criterion</h2>" in html and "<td>escalation:high-value</td>" in html
    assert "<h2>By criterion</h2>" in result_html(cand)
