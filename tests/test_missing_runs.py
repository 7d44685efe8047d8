"""Runs assigned but never reported, counted as failed where the policy says so.

`gate.reports.missing_runs` ("fail" by default, or "ignore"): the pure rules
(`gatekeeper.stats.missing`: which cell a bucket's missing runs join, when such a
cell counts), and on a real router with its own Redis the gate view's figures and
decide()'s answer for a candidate that silently drops its failing runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from bindings.models import VersionedBinding
from gatekeeper.machine.decide import Action
from gatekeeper.stats import concurrent
from gatekeeper.stats.missing import (
    REPORT_BUCKET_S,
    cell_bucket,
    mature_before,
    missing_of,
    with_missing,
)
from router.cli.main import main
from tests.conftest import CALLER, OPERATOR, auth
from tests.gatekeeping import binding, keeper, tick_until
from tests.reporting import STAMPS, decide_now, fill_stage, live, record
from tests.servers import werkzeug_server

ROLE = "summarizer"


# -- the pure rules ------------------------------------------------------------------

def test_a_mature_buckets_missing_runs_join_its_cell_as_failed_runs() -> None:
    """Assigned 10, reported 7 in a mature bucket: 3 runs join the "" cell, all failed."""
    missing = missing_of(({4: 10}, {4: 7}), ({4: 90}, {4: 95}), mature=5)
    assert dict(missing.candidate) == {4: 3} and dict(missing.current) == {}  # floored at 0
    cand, cur = with_missing({(cell_bucket(4), ""): (7, 1)}, {(cell_bucket(4), ""): (95, 4)},
                             missing)
    assert cand[(cell_bucket(4), "")] == (10, 4) and cur[(cell_bucket(4), "")] == (95, 4)
    assert missing.waiting_from is None and missing.counted_before(99) == 99


def test_a_cell_with_runs_in_flight_waits_and_a_fully_reported_one_does_not() -> None:
    """An unreported run in a bucket still in its grace stops the count at its cell."""
    waiting = missing_of(({6: 10, 7: 10}, {6: 10, 7: 9}), ({6: 90, 7: 90}, {6: 90, 7: 90}),
                         mature=5)
    assert waiting.candidate == {} and waiting.waiting_from == cell_bucket(7)
    assert waiting.counted_before(10_000) == cell_bucket(7)
    reported = missing_of(({6: 10}, {6: 10}), ({6: 90}, {6: 90}), mature=5)
    assert reported.waiting_from is None


def test_report_buckets_are_the_exposures_width_whatever_the_cells_are(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With 1 s comparison cells a 30 s report bucket joins the cell of its last second."""
    monkeypatch.setattr(concurrent, "BUCKET_S", 1)
    assert REPORT_BUCKET_S == 30 and cell_bucket(2) == 89
    assert mature_before(200.0, 120.0) == 2  # buckets 0 and 1 ended 120 s before 200


# -- on a real router ----------------------------------------------------------------

def _router(app: Flask, policy: dict[str, Any] | None = None, **extra: Any) -> Any:
    with werkzeug_server(app) as url:
        live(url, app)
        gate: dict[str, Any] = {"thresholds": {"min_samples": 10}}
        if policy is not None:
            gate["reports"] = policy
        r = requests.put(f"{url}/v1/bindings/{ROLE}", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                               "share": 0.1, "gate": gate, **extra})
        assert r.status_code == 201, r.text
        yield url


@pytest.fixture
def router(app: Flask) -> Any:
    """A router over real HTTP, summarizer on a 0.1 canary with the default policy."""
    yield from _router(app)


@pytest.fixture
def ignoring(app: Flask) -> Any:
    """The same, with `gate.reports.missing_runs: ignore`."""
    yield from _router(app, {"missing_runs": "ignore"})


def _record(url: str) -> VersionedBinding:
    return record(url, ROLE)


def _stage(url: str, cand: tuple[int, int, int], cur: tuple[int, int, int],
           buckets: int = 8) -> None:
    """Per bucket, 10 minutes back, each arm's (assigned, reported, failed among reported),
    the runs reported 0.5 s after they end (the cells wait for runs' report lag)."""
    fill_stage(url, ROLE, REPORT_BUCKET_S, cand, cur, buckets)


def _decide(url: str) -> Any:
    return decide_now(url, ROLE)


#: The candidate silently drops 3 of each 10 runs (each would have failed) and the 7 that
#: report pass; current reports all 90, 4 of them failed.
DROPPING = ((10, 7, 0), (90, 90, 4))


def test_a_candidate_dropping_its_failing_runs_is_rolled_back_on_run_failures(
        router: str) -> None:
    """Policy "fail": the 30% that never reported are failures; the run-failure comparison
    rolls the candidate back, naming the runs that never reported."""
    _stage(router, *DROPPING)
    view, decision = _decide(router)
    assert view["policy"]["reports"] == {"missing_runs": "fail", "grace_seconds": 120.0}
    failure = view["concurrent"]["metrics"]["run_failure"]
    assert failure["candidate"] == {"n": 80, "events": 24}, failure
    assert failure["current"] == {"n": 720, "events": 32}
    missing = view["concurrent"]["missing"]
    assert (missing["candidate"], missing["current"]) == (24, 0)
    assert missing["unadjusted"]["candidate"] == {"n": 56, "events": 0}
    adjusted = view["arms"]["candidate"]["counting_missing"]
    assert adjusted == {"missing": 24, "n": 80, "passes": 56, "pass_rate": 0.7}
    assert view["arms"]["candidate"]["pass_rate"] == 1.0  # the unadjusted figure beside it
    assert decision.action is Action.ROLLBACK, decision
    assert decision.details["response"]["rule"] in ("drift", "sequential"), decision.details
    assert "24 candidate and 0 current runs that never reported as failed" in decision.reason


def test_the_gatekeeper_rolls_the_dropping_candidate_back_naming_the_missing_runs(
        router: str) -> None:
    """A real Gatekeeper ticking over HTTP rolls the role back; the history entry's reason
    names the runs that never reported."""
    _stage(router, *DROPPING)
    with keeper(router, "missing-runs") as gatekeeper:
        tick_until(gatekeeper, lambda: binding(router, ROLE)["stage"] == "rolled_back",
                   "the dropping candidate to be rolled back")
    entry = requests.get(f"{router}/v1/bindings/{ROLE}/history?limit=1", headers=auth(CALLER),
                         timeout=5).json()["entries"][0]
    assert entry["actor"] == "gatekeeper" and entry["action"] == "rollback", entry
    assert "24 candidate and 0 current runs that never reported as failed" in entry["reason"]


def test_with_the_policy_off_the_figures_are_the_reported_runs(ignoring: str) -> None:
    """Policy "ignore": run failures over the runs that arrived; the report-rate test alone
    acts on the missing ones."""
    _stage(ignoring, *DROPPING)
    view, decision = _decide(ignoring)
    failure = view["concurrent"]["metrics"]["run_failure"]
    assert failure["candidate"] == {"n": 56, "events": 0}
    assert view["concurrent"]["missing"] is None
    assert "counting_missing" not in view["arms"]["candidate"]
    assert view["reports"]["missing_runs"]["applied"] is False
    assert decision.action is Action.ROLLBACK and decision.details["response"]["rule"] == "reports"
    assert "never reported" not in decision.reason and "report rate" in decision.reason


def test_both_arms_missing_alike_never_rolls_back(router: str) -> None:
    """A reporter losing 30% of both arms' runs (each would have failed): no evidence. It
    reports under 95% of its own current runs, so the runs it lost say nothing about a
    config and are not counted as failed (issue 33: else any token could add them)."""
    _stage(router, (10, 7, 0), (90, 63, 0))
    view, decision = _decide(router)
    failure = view["concurrent"]["metrics"]["run_failure"]
    assert failure["candidate"]["events"] == 0 and failure["current"]["events"] == 0
    assert view["reports"]["missing_runs"]["counted_reporters"] == []
    assert failure["log_e"] < 1.0 and view["concurrent"]["alarms"] == []
    assert decision.action is Action.HOLD, decision  # both_short: alert and hold
    assert decision.alerts


def test_targeting_rules_in_canary_keep_the_policy_off_and_say_why(app: Flask) -> None:
    """Exposures are not split per rule: under acting rules nothing is counted, and the
    view says why."""
    rules = [{"when": {"tenant": ["hard"]}, "arm": "candidate", "name": "hard"}]
    for url in _router(app, None, rules=rules):
        _stage(url, *DROPPING)
        view, _ = _decide(url)
        assert view["concurrent"]["missing"] is None
        assert view["concurrent"]["metrics"]["run_failure"]["candidate"]["n"] == 56
        why = view["reports"]["missing_runs"]
        assert why["applied"] is False and "targeting rules" in why["why_not"]


@pytest.mark.parametrize("reports, field", [
    ({"missing_runs": "sometimes"}, "gate.reports.missing_runs"),
    ({"missing_runs": True}, "gate.reports.missing_runs"),
    ({"grace_seconds": "120"}, "gate.reports.grace_seconds"),
    ({"grace_seconds": 0}, "gate.reports.grace_seconds"),
    ({"grace_seconds": 10 ** 6}, "gate.reports.grace_seconds"),
    ({"colour": "blue"}, "gate.reports.colour"),
])
def test_a_bad_reports_policy_is_422_naming_the_field(client: FlaskClient,
                                                      reports: dict[str, Any],
                                                      field: str) -> None:
    """A bad `gate.reports` is refused whole with the field named; nothing is stored."""
    r = client.put(f"/v1/bindings/{ROLE}", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "gate": {"reports": reports}})
    assert r.status_code == 422, r.json
    assert field in r.json["error"]["message"], r.json
    assert client.get(f"/v1/bindings/{ROLE}", headers=auth(OPERATOR)).status_code == 404


def test_status_and_the_role_page_show_the_policy_and_both_pass_rates(router: str) -> None:
    """`rolegate status` and the role page show the pass rate counting missing runs beside
    the reported runs' own, and the policy."""
    _stage(router, *DROPPING)
    env = {"ROLEGATE_URL": router, "ROLEGATE_TOKEN": OPERATOR, "ROLEGATE_RETRY_NO_WAIT": "1"}
    out = CliRunner().invoke(main, ["status", ROLE], env=env, catch_exceptions=False).output
    assert "pass 100.0%" in out and "70.0% counting 24 unreported as failed" in out, out
    assert "missing runs count as failed (gate.reports.missing_runs: fail" in out, out
    page = requests.get(f"{router}/ui/roles/{ROLE}", headers=auth(CALLER), timeout=5).text
    assert 'id="missing-runs"' in page and "counting 24 unreported as failed" in page


def test_reports_are_counted_in_the_exposures_buckets_whatever_the_cells_are(
        tmp_path: Any) -> None:
    """With ROLEGATE_BUCKET_SECONDS=10 a run still counts as reported in the 30 s bucket of
    its start, the width the SDK and router count exposures in (a 10 s one would never
    match them)."""
    script = (
        "from bindings.models import Invariants\n"
        "from gatekeeper.checks.invariants import check\n"
        "from gatekeeper.window import increments\n"
        "from rolegate.trace import Trace\n"
        "t = Trace.model_validate({'run_id': 'r', 'role': 'x', 'config': 'c', 'arm': 'current',"
        f" 'key': 'k', 'tools': [], 'time': 101.0, 'latency_s': 8.0, 'stamps': {STAMPS!r}}})\n"
        "print(sorted(k for k in increments(t, check(t, Invariants())) if k[:3] in ('rep', 'cn:')))\n")
    env = {**os.environ, "ROLEGATE_BUCKET_SECONDS": "10"}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, check=True,
                         capture_output=True, text=True).stdout
    # Started at 93 s (ended at 101 s): cell 9 of 10 s and report bucket 3 of 30 s, both by start.
    assert out.strip() == "['cn:9:', 'rep:3']", out


def test_a_run_started_a_moment_after_its_resolve_is_not_missing() -> None:
    """Resolved at the end of bucket 4, started (and filed as reported) in bucket 5: the
    surplus of bucket 5 covers bucket 4, on either arm; a real shortfall still counts."""
    moved = missing_of(({4: 10, 5: 10}, {4: 8, 5: 12}), ({4: 90, 5: 90}, {4: 87, 5: 93}),
                       mature=6)
    assert dict(moved.candidate) == {} and dict(moved.current) == {}
    lost = missing_of(({4: 10, 5: 10}, {4: 5, 5: 11}), ({4: 90}, {4: 90}), mature=6)
    assert dict(lost.candidate) == {4: 4}
