"""tick() against a real router on loopback: gate view sections, moves with If-Match, dry-run."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask

from gatekeeper import loop
from gatekeeper.loop import Gatekeeper, _act, tick
from gatekeeper.machine.decide import Action, Decision
from gatekeeper.machine.details import DecisionDetails
from gatekeeper.webhooks import Notifier
from rolegate.http import ApiClient
from router.cli import main
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.population import STAMPS, Population
from tests.servers import werkzeug_server

# `power: None`: twenty runs could not show a drop of 0.05, and these tests are about the
# loop (tests/test_power_hold.py holds stages for power).
POLICY = {"thresholds": {"min_samples": 20, "min_pass_rate": 0.9, "alpha": 0.01,
                         "min_stage_seconds": 0.0, "bake_seconds": 0.0}, "power": None,
          "invariants": {"artifact_exists": ["out.md"], "forbidden_tools": ["delete_all"]}}


def _create(url: str, role: str, candidate: str, stage: str = "shadow") -> None:
    binding = {"current": "cfg-a", "candidate": candidate, "stage": stage, "share": 0.0,
               "steps": [0.5, 1.0], "gate": POLICY}
    with requests.put(f"{url}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                      timeout=5) as answer:
        assert answer.status_code == 201, answer.text


@pytest.fixture
def live(app: Flask) -> Iterator[str]:
    """The router on a loopback port."""
    with werkzeug_server(app) as url:
        yield url


@pytest.fixture
def api(live: str) -> Iterator[ApiClient]:
    """A gatekeeper-scope client."""
    client = ApiClient(live, GATEKEEPER, attempts=2)
    yield client
    client.close()


def test_gate_view_has_paired_and_drift(live: str, api: ApiClient) -> None:
    """In shadow the gate view pairs current and shadow runs and shows drift detectors."""
    _create(live, "r", "cfg-bad")
    population = Population(live, ["r"], batch=40)
    population.step()
    view = api.get("/v1/roles/r/gate")
    paired = view["paired"]
    assert paired["pairs"] == 40
    assert paired["flips"] == {"pass_to_fail": 4, "fail_to_pass": 0}
    assert paired["trajectory"]["SAME"] == 40
    assert paired["regressed_keys"] == ["job-1", "job-2", "job-21", "job-22"]
    assert set(view["drift"]["candidate"]) == {"run_failure", "tool_error", "forbidden_call"}
    assert view["drift"]["alert"] is False


def test_tick_advances_healthy_and_rolls_back_regressed(live: str, api: ApiClient) -> None:
    """One tick promotes a passing shadow and rolls back a failing one, each with If-Match."""
    _create(live, "good", "cfg-good")
    _create(live, "bad", "cfg-broken")
    Population(live, ["good", "bad"], batch=40).step()
    decisions = {d.role: d for d in tick(api, time.time())}
    assert decisions["good"].action is Action.ADVANCE
    assert decisions["good"].details["outcome"] == "applied"
    assert decisions["bad"].action is Action.ROLLBACK
    # In shadow the evidence is the flips carried on by the concurrent comparison, or
    # the failure rate: either way the reason names the runs that failed.
    reason = decisions["bad"].reason
    assert "candidate runs failed" in reason or "pass->fail" in reason, reason
    bad = api.get("/v1/bindings/bad")
    assert bad["binding"]["stage"] == "rolled_back"
    entry = api.get("/v1/bindings/bad/history")["entries"][0]
    assert entry["actor"] == "gatekeeper" and entry["action"] == "rollback"
    assert entry["details"]["gatekeeper"]["passes"] == 20  # cfg-broken passes 1 job in 2
    assert api.get("/v1/bindings/good")["binding"]["stage"] == "canary"


def test_stale_decision_is_refused(live: str, api: ApiClient) -> None:
    """A move made on a version someone else changed since is refused (409) and not applied."""
    _create(live, "r", "cfg-good")
    Population(live, ["r"], batch=40).step()
    with requests.post(f"{live}/v1/bindings/r/pause", json={"reason": "human"},
                       headers={**auth(OPERATOR), "If-Match": "1"}, timeout=5) as answer:
        assert answer.status_code == 200
    with requests.post(f"{live}/v1/bindings/r/resume", json={"reason": "human"},
                       headers=auth(OPERATOR), timeout=5) as answer:
        assert answer.status_code == 200
    stale = Decision("r", Action.ADVANCE, 1, "shadow", "stale leader")
    outcome = _act(api, stale, dry_run=False, notifier=None)
    assert outcome.details["outcome"] == "refused"
    assert api.get("/v1/bindings/r")["version"] == 3


def test_paused_role_untouched_and_dry_run(live: str, api: ApiClient) -> None:
    """A paused role is skipped; dry-run decides without writing anything."""
    _create(live, "p", "cfg-broken")
    _create(live, "d", "cfg-broken")
    Population(live, ["p", "d"], batch=40).step()
    with requests.post(f"{live}/v1/bindings/p/pause", json={"reason": "human"},
                       headers=auth(OPERATOR), timeout=5) as answer:
        assert answer.status_code == 200
    decisions = {d.role: d for d in tick(api, time.time(), dry_run=True)}
    assert decisions["p"].action is Action.SKIP
    assert decisions["d"].action is Action.ROLLBACK
    assert decisions["d"].details["outcome"] == "dry_run"
    assert api.get("/v1/bindings/d")["version"] == 1
    assert api.get("/v1/bindings/p")["binding"]["stage"] == "shadow"


def test_gatekeeper_lease_handover(live: str, api: ApiClient) -> None:
    """Only the lease holder ticks; after it releases, the other takes over."""
    other = ApiClient(live, GATEKEEPER, attempts=2)
    try:
        first = Gatekeeper(api, interval=0.05, lease_ttl=5, holder="g1")
        second = Gatekeeper(other, interval=0.05, lease_ttl=5, holder="g2")
        assert first.acquire() and not second.acquire()
        assert second.once() == []
        first.release()
        assert second.acquire() and second.leader
        assert api.get("/v1/gatekeeper/lease")["holder"] == "g2"
    finally:
        other.close()


def test_calibrate_endpoint_counts_false_alarms(live: str, api: ApiClient) -> None:
    """Calibration replays the stored current runs: a smaller h never has fewer false alarms."""
    _create(live, "c", "cfg-good")
    population = Population(live, ["c"], batch=100)
    population.step()
    result = api.get("/v1/roles/c/drift/calibrate",
                     params=[("config", "cfg-a"), ("h", 0.5), ("h", 20), ("shift", 0.01)])
    assert result["runs"] == 100 and result["metric"] == "run_failure"
    rows = {row["h"]: row for row in result["results"]}
    assert rows[0.5]["p0"] == pytest.approx(0.05)
    assert rows[0.5]["false_alarms"] >= 1 and rows[20]["false_alarms"] == 0
    with requests.get(f"{live}/v1/roles/c/drift/calibrate", headers=auth(GATEKEEPER),
                      timeout=5) as answer:
        assert answer.status_code == 400 and answer.json()["error"]["details"]["field"] == "h"


def test_cli_once_dry_run_and_calibrate(live: str, api: ApiClient) -> None:
    """`gatekeeper --once --dry-run` prints decisions, changes nothing; calibrate prints rows."""
    _create(live, "r", "cfg-broken")
    Population(live, ["r"], batch=40).step()
    runner = CliRunner()
    result = runner.invoke(main, ["gatekeeper", "--once", "--dry-run", "--url", live,
                                  "--token", GATEKEEPER])
    assert result.exit_code == 0, result.output
    # stdout alone: a log record of the live werkzeug server in this process may reach the
    # handler the CLI's logging.basicConfig put on stderr, which `output` interleaves.
    decision = json.loads(result.stdout.strip().splitlines()[0])
    assert decision["role"] == "r" and decision["action"] == "rollback"
    assert decision["details"]["outcome"] == "dry_run"
    assert api.get("/v1/bindings/r")["version"] == 1
    assert api.get("/v1/gatekeeper/lease")["holder"] is None
    # Another leader holds the lease: a real --once does nothing, a dry run still reports.
    api.post("/v1/gatekeeper/lease", {"holder": "leader", "ttl_s": 30})
    blocked = runner.invoke(main, ["gatekeeper", "--once", "--url", live, "--token", GATEKEEPER])
    assert blocked.exit_code == 0 and "another gatekeeper holds the lease" in blocked.output
    assert api.get("/v1/bindings/r")["version"] == 1
    dry = runner.invoke(main, ["gatekeeper", "--once", "--dry-run", "--url", live,
                               "--token", GATEKEEPER])
    assert dry.exit_code == 0 and '"action": "rollback"' in dry.stdout
    assert api.get("/v1/gatekeeper/lease")["holder"] == "leader"
    calibrated = runner.invoke(main, ["gatekeeper", "calibrate", "r", "--config", "cfg-a",
                                      "--h", "2", "--h", "8", "--url", live,
                                      "--token", GATEKEEPER])
    assert calibrated.exit_code == 0, calibrated.output
    rows = json.loads(calibrated.stdout)["results"]
    assert [row["h"] for row in rows] == [2.0, 8.0]
    refused = runner.invoke(main, ["gatekeeper", "--once", "--url", live, "--token", "nope"])
    assert refused.exit_code == 2


class _Recorder(Notifier):
    """A notifier with no URLs that keeps what it was asked to send."""

    def __init__(self) -> None:
        super().__init__([])
        self.sent: list[dict[str, Any]] = []

    def emit(self, kind: str, role: str, **payload: Any) -> dict[str, Any]:
        event = super().emit(kind, role, **payload)
        self.sent.append(event)
        return event


def test_drifting_stable_current_raises_one_alert(live: str, api: ApiClient) -> None:
    """A stable current whose tool-error rate jumps is flagged in the view and alerted once."""
    # A fixed h: the derived one (for a 40-million-run ARL) would take longer to alarm.
    binding = {"current": "cfg-a", "gate": {**POLICY, "drift": {"h": 5.0}}}
    with requests.put(f"{live}/v1/bindings/s", json=binding, headers=auth(OPERATOR),
                      timeout=5) as answer:
        assert answer.status_code == 201
    traces = []
    for i in range(200):
        step = {"tool": "search", **({"error": "timeout"} if i >= 100 else {})}
        traces.append({"run_id": f"s-{i}", "role": "s", "config": "cfg-a", "arm": "current",
                       "key": f"job-{i}", "steps": [step], "artifacts": ["out.md"],
                       "stamps": STAMPS})
    with requests.post(f"{live}/v1/traces", json={"traces": traces},
                       headers=auth(CALLER), timeout=10) as answer:
        assert answer.status_code == 200, answer.text
    view = api.get("/v1/roles/s/gate")
    assert view["drift"]["alert"] is True
    assert {"arm": "current", "metric": "tool_error"} in view["drift"]["alarms"]
    recorder, alerted = _Recorder(), set[str]()
    for _ in range(2):
        decisions = tick(api, time.time(), notifier=recorder, alerted=alerted)
    assert decisions[0].action is Action.SKIP
    assert decisions[0].alerts == ("drift on current cfg-a: tool_error",)
    alarms = [e for e in recorder.sent if e["kind"] == "alarm"]
    assert len(alarms) == 1 and alarms[0]["metric"] == "tool_error"
    assert alarms[0]["cusum"]["alarm"] is True


def test_one_roles_failing_gate_view_does_not_stall_the_others(live: str, api: ApiClient,
                                                               app: Flask) -> None:
    """A role whose gate view answers 500 is held; the other roles are still judged and moved."""
    _create(live, "good", "cfg-good")
    _create(live, "broken", "cfg-broken")
    Population(live, ["good"], batch=40).step()
    connection = app.extensions["rolegate"].redis
    connection.hset("rolegate:config:{cfg-broken}", mapping={"version": 1, "record": "{}"})
    with requests.get(f"{live}/v1/roles/broken/gate", headers=auth(GATEKEEPER),
                      timeout=5) as answer:
        assert answer.status_code == 500 and answer.json()["error"]["code"] == "corrupt_record"
    decisions = {d.role: d for d in tick(api, time.time())}
    assert decisions["broken"].action is Action.HOLD
    assert decisions["broken"].details["error"]["code"] == "corrupt_record"
    assert decisions["good"].action is Action.ADVANCE
    assert api.get("/v1/bindings/good")["binding"]["stage"] == "canary"


def test_one_role_decide_cannot_judge_is_held_and_the_others_are_moved(
        live: str, api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """decide() raising for one role (a bug, injected here) holds that role, named unjudged;
    the tick goes on and moves the others."""
    _create(live, "good", "cfg-good")
    _create(live, "broken", "cfg-broken")
    Population(live, ["good"], batch=40).step()
    judged = loop.decide

    def decide_or_fail(role: str, *args: Any) -> Decision:
        if role == "broken":
            raise ValueError("a figure decide() cannot read")
        return judged(role, *args)

    monkeypatch.setattr(loop, "decide", decide_or_fail)
    decisions = {d.role: d for d in tick(api, time.time())}
    assert decisions["broken"].action is Action.HOLD
    assert decisions["broken"].reason == "judging failed: ValueError"
    assert decisions["broken"].details["unjudged"] is True
    assert decisions["good"].action is Action.ADVANCE
    assert api.get("/v1/bindings/good")["binding"]["stage"] == "canary"
    assert api.get("/v1/bindings/broken")["binding"]["stage"] == "shadow"


def test_once_exits_non_zero_when_a_role_could_not_be_judged(live: str, app: Flask) -> None:
    """`gatekeeper --once` exits 1 naming the role whose gate view failed; 0 once all are judged."""
    _create(live, "good", "cfg-good")
    _create(live, "broken", "cfg-broken")
    connection = app.extensions["rolegate"].redis
    connection.hset("rolegate:config:{cfg-broken}", mapping={"version": 1, "record": "{}"})
    args = ["gatekeeper", "--once", "--dry-run", "--url", live, "--token", GATEKEEPER]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert "could not judge 1 role(s)" in result.stderr and "broken" in result.stderr
    connection.delete("rolegate:config:{cfg-broken}")
    assert CliRunner().invoke(main, args).exit_code == 0


class _OtherShape(DecisionDetails):
    """Details as a gatekeeper of another version might send them: a count as a word."""

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "n": "many"}

    def with_(self, **figures: Any) -> DecisionDetails:
        return DecisionDetails.model_validate({**super().as_json(), **figures})


@pytest.mark.parametrize("verb", ["rollback", "promote"])
def test_a_rollback_is_never_held_over_details_the_router_refuses(live: str, api: ApiClient,
                                                                  verb: str) -> None:
    """A 422 on a rollback's details (version skew) sends the rollback again with the details
    as text, so the role is rolled back; a promotion stays refused and the role waits."""
    _create(live, "r", "cfg-b")
    with requests.post(f"{live}/v1/bindings/r/rollback", headers=auth(GATEKEEPER), timeout=5,
                       json={"reason": "x", "details": {"gatekeeper": {"n": "many"}}}) as refused:
        assert refused.status_code == 422 and "n" in refused.text  # what the router says
    version = api.get("/v1/bindings/r")["version"]
    action = Action.ROLLBACK if verb == "rollback" else Action.ADVANCE
    decision = Decision("r", action, version, "shadow", "too many failures",
                        details=_OtherShape(verdict="fail"))
    if verb == "promote":
        with pytest.raises(loop.ApiError) as caught:
            _act(api, decision, dry_run=False, notifier=None)
        assert caught.value.status == 422
        assert api.get("/v1/bindings/r")["binding"]["stage"] == "shadow"
        return
    acted = _act(api, decision, dry_run=False, notifier=None)
    assert acted.details["outcome"] == "applied"
    record = api.get("/v1/bindings/r")
    assert record["binding"]["stage"] == "rolled_back" and record["version"] == version + 1
    entry = api.get("/v1/bindings/r/history")["entries"][0]  # newest first
    assert entry["action"] == "rollback" and entry["reason"] == "gatekeeper: too many failures"
    assert "gatekeeper" not in entry["details"]
    assert json.loads(entry["details"]["gatekeeper_json"]) == {"verdict": "fail", "n": "many"}
    assert "n" in entry["details"]["gatekeeper_details_refused"]
