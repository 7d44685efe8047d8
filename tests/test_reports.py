"""Runs that never arrive: every assignment counted, reported against assigned, per arm.

The pure check (`gatekeeper.stats.reports`), the counts from HTTP resolves and
the SDK's in-process resolves (`rolegate.exposures`, POST /v1/exposures), and
the gate view's `reports` section read by decide() on a real router.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from bindings.models import VersionedBinding
from gatekeeper.machine.decide import Action
from gatekeeper.stats.budget import REPORTS_SHARE
from gatekeeper.stats.concurrent import BUCKET_S
from gatekeeper.stats.reports import BOTH_SHORT, LAGGING, OK, SHORT, report_check
from gatekeeper.store.exposures import ExposureStore
from rolegate import Client
from rolegate.exposures import epoch_of
from router.cli.main import main
from tests.conftest import CALLER, OPERATOR, auth
from tests.reporting import decide_now, fill_stage, live, record
from tests.servers import werkzeug_server

ROLE = "summarizer"
ALPHA = REPORTS_SHARE * 0.0025


def _arm(assigned: int, reported: int, buckets: int) -> tuple[dict[int, int], dict[int, int]]:
    return ({b: assigned for b in range(buckets)}, {b: reported for b in range(buckets)})


def test_a_candidate_missing_30_percent_of_its_reports_is_short() -> None:
    """30 of each 100 candidate runs never report, current's all do: the test rejects."""
    check = report_check(_arm(20, 14, 10), _arm(180, 180, 10), 10, ALPHA)
    assert check.verdict == SHORT, check.as_dict()
    assert check.assigned == (200, 1800) and check.reported == (140, 1800)
    assert "70.0%" in check.reason() and "100.0%" in check.reason()


def test_a_candidate_whose_runs_all_report_is_ok_and_young_buckets_wait() -> None:
    """Every run reports: ok. Buckets at or after `before` (runs still in flight) don't count."""
    assert report_check(_arm(20, 20, 10), _arm(180, 180, 10), 10, ALPHA).verdict == OK
    young = report_check(({9: 20}, {9: 0}), ({9: 180}, {9: 0}), 9, ALPHA)
    assert young.assigned == (0, 0)


def test_both_arms_short_is_no_candidates_doing() -> None:
    """Current short as well (a reporter gone): both_short, whatever the candidate's rate."""
    check = report_check(_arm(20, 10, 10), _arm(180, 120, 10), 10, ALPHA)
    assert check.verdict == BOTH_SHORT and "no candidate causes this" in check.reason()


def test_a_small_lag_holds_before_the_evidence_is_in() -> None:
    """A little under current's rate, too few runs to reject: lagging (promotion waits)."""
    assert report_check(_arm(10, 9, 2), _arm(90, 90, 2), 2, ALPHA).verdict == LAGGING


@pytest.fixture
def router(app: Flask) -> Any:
    """The router over real HTTP with summarizer on a 0.1 canary (stage began 20 minutes ago)."""
    with werkzeug_server(app) as url:
        r = requests.put(f"{url}/v1/bindings/{ROLE}", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                               "share": 0.1, "gate": {"thresholds": {"min_samples": 10}}})
        assert r.status_code == 201, r.text
        yield live(url, app)


def _record(url: str) -> VersionedBinding:
    return record(url, ROLE)


def _stage(url: str, cand: tuple[int, int], cur: tuple[int, int], buckets: int = 8) -> None:
    """Per bucket, 10 minutes back: `cand` (assigned, reported) candidate runs, `cur` current's."""
    fill_stage(url, ROLE, BUCKET_S, cand, cur, buckets)


def _decide(url: str) -> Any:
    return decide_now(url, ROLE)


def test_a_candidate_failing_to_report_30_percent_is_rolled_back(router: str) -> None:
    """Real router: 30% of candidate runs never arrive, current's all do: rollback naming it."""
    _stage(router, (10, 7), (90, 90))
    view, decision = _decide(router)
    assert view["reports"]["verdict"] == SHORT, view["reports"]
    assert view["reports"]["assigned"] == {"candidate": 80, "current": 720}
    # The default gate.reports.missing_runs "fail" counts the missing runs as failed, so
    # the run-failure comparison (read before the report-rate test) may name them first.
    assert decision.action is Action.ROLLBACK
    assert "report rate" in decision.reason or "never reported" in decision.reason


def test_a_candidate_whose_runs_all_report_is_not_rolled_back(router: str) -> None:
    """Every run reports in both arms: the report check is ok and does not act."""
    _stage(router, (10, 10), (90, 90))
    view, decision = _decide(router)
    assert view["reports"]["verdict"] == OK
    assert decision.action is not Action.ROLLBACK, decision


def test_both_arms_short_alerts_and_holds(router: str) -> None:
    """Both arms lose a third of their reports: hold with an alert, never a rollback."""
    _stage(router, (9, 6), (90, 60))
    view, decision = _decide(router)
    assert view["reports"]["verdict"] == BOTH_SHORT
    assert decision.action is Action.HOLD and decision.alerts, decision
    assert "no candidate causes this" in decision.alerts[-1]


def test_http_resolves_are_counted_per_arm(app: Flask, client: FlaskClient) -> None:
    """Each GET /v1/resolve (the WSGI fast path and the Flask view) counts its arm."""
    r = client.put(f"/v1/bindings/{ROLE}", headers=auth(OPERATOR),
                   json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                         "share": 0.5})
    assert r.status_code == 201
    app.extensions["rolegate"].cache.refresh()
    arms = [client.get(f"/v1/resolve/{ROLE}?key=job-{n}", headers=auth(CALLER)).json["arm"]
            for n in range(40)]
    arms.append(client.get(f"/v1/resolve/{ROLE}?key=job-x&include=body",
                           headers=auth(CALLER)).json["arm"])
    app.extensions["rolegate_exposures"].flush()
    store = ExposureStore(app.extensions["rolegate"].redis)
    epoch = epoch_of(_record_of(client).binding.stage_since)
    assert sum(store.buckets(ROLE, "cfg_b", "candidate", epoch).values()) == arms.count(
        "candidate")
    assert sum(store.buckets(ROLE, "cfg_a", "current", epoch).values()) == arms.count("current")


def _record_of(client: FlaskClient) -> VersionedBinding:
    return VersionedBinding.model_validate(
        client.get(f"/v1/bindings/{ROLE}", headers=auth(CALLER)).json)


def test_in_process_resolves_are_sent_by_the_sdk(app: Flask, router: str) -> None:
    """Client.resolve counts in process; close() sends the counts: the router has them all."""
    client = Client(router, CALLER, refresh_interval=0.1)
    arms = [client.resolve(ROLE, f"job-{n}")["arm"] for n in range(200)]
    client.close()
    store = ExposureStore(app.extensions["rolegate"].redis)
    epoch = epoch_of(_record(router).binding.stage_since)
    assert sum(store.buckets(ROLE, "cfg_b", "candidate", epoch).values()) == arms.count(
        "candidate") > 0
    assert sum(store.buckets(ROLE, "cfg_a", "current", epoch).values()) == arms.count("current")


def test_bad_exposure_rows_are_422_and_nothing_is_added(app: Flask, client: FlaskClient) -> None:
    """A negative count or an unknown arm is refused whole, with the field named."""
    bad = {"exposures": [{"role": ROLE, "config": "cfg_a", "arm": "current", "epoch": "0",
                          "bucket": 1, "count": 3},
                         {"role": ROLE, "config": "cfg_a", "arm": "nobody", "epoch": "0",
                          "bucket": 1, "count": 3}]}
    r = client.post("/v1/exposures", json=bad, headers=auth(CALLER))
    assert r.status_code == 422 and "arm" in r.json["error"]["message"]
    store = ExposureStore(app.extensions["rolegate"].redis)
    assert store.buckets(ROLE, "cfg_a", "current", "0") == {}


def test_status_and_the_dashboard_show_reported_against_assigned(router: str) -> None:
    """`rolegate status` prints the reported line; the role page has the reports table."""
    _stage(router, (10, 7), (90, 90))
    env = {"ROLEGATE_URL": router, "ROLEGATE_TOKEN": OPERATOR, "ROLEGATE_RETRY_NO_WAIT": "1"}
    out = CliRunner().invoke(main, ["status", ROLE], env=env, catch_exceptions=False).output
    assert "reported   short: report rate: candidate reported 56 of 80" in out, out
    page = requests.get(f"{router}/ui/roles/{ROLE}", headers=auth(CALLER), timeout=5).text
    assert 'id="reports-table"' in page and "short: report rate" in page
