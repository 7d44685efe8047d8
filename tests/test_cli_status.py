"""`rolegate status`: one role's stage, verdicts and what next; every role; --watch; --wait."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import requests
from click.testing import CliRunner, Result
from flask import Flask

from router.cli.main import main
from router.cli.status import duration
from tests.conftest import CALLER, OPERATOR, auth
from tests.deadlines import scaled
from tests.servers import werkzeug_server

ROLEGATE = str(Path(sys.executable).parent / "rolegate")
STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
GATE = {"thresholds": {"min_samples": 20, "min_pass_rate": 0.8},
        "invariants": {"forbidden_tools": ["web_write"]}}


@pytest.fixture
def live_url(app: Flask) -> Iterator[str]:
    """The test app over real HTTP, with summarizer on a 0.1 canary and 5 candidate runs."""
    with werkzeug_server(app) as url:
        r = requests.put(f"{url}/v1/bindings/summarizer", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                               "share": 0.1, "gate": GATE})
        assert r.status_code == 201, r.text
        post_traces(url, "candidate", 5)
        yield url


def post_traces(url: str, arm: str, count: int, start: int = 0,
                tools: tuple[str, ...] = ("read",)) -> None:
    """Report `count` traces of `arm` for summarizer."""
    batch = [{"run_id": f"{arm}-{start + i}", "role": "summarizer", "arm": arm,
              "config": "cfg_a" if arm == "current" else "cfg_b", "key": f"job-{start + i}",
              "tools": list(tools), "stamps": STAMPS} for i in range(count)]
    r = requests.post(f"{url}/v1/traces", json={"traces": batch}, headers=auth(CALLER),
                      timeout=5)
    assert r.status_code in (200, 207), r.text


def move(url: str, verb: str, **body: Any) -> None:
    """POST a rollout move on summarizer as the operator."""
    r = requests.post(f"{url}/v1/bindings/summarizer/{verb}", headers=auth(OPERATOR),
                      json={"reason": "test", **body}, timeout=5)
    assert r.status_code == 200, r.text


def run(url: str, *args: str) -> Result:
    """`rolegate ARGS` against `url` as the operator."""
    env = {"ROLEGATE_URL": url, "ROLEGATE_TOKEN": OPERATOR, "ROLEGATE_RETRY_NO_WAIT": "1"}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def spawn(url: str, *args: str) -> subprocess.Popen[str]:
    """`rolegate ARGS` as its own process (what a deploy pipeline runs)."""
    env = {**os.environ, "ROLEGATE_URL": url, "ROLEGATE_TOKEN": OPERATOR}
    return subprocess.Popen([ROLEGATE, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_status_shows_stage_verdicts_and_what_next(live_url: str) -> None:
    """status ROLE prints the stage, each arm's verdict with n, and the plain-words next."""
    result = run(live_url, "status", "summarizer")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("summarizer: canary 0.1 (version 1")
    assert "candidate  cfg_b  insufficient_data  n=5  pass 100.0%" in out
    assert "what next  needs 15 more candidate runs (min_samples 20)" in out
    assert "next: canary 0.5" in out


def test_status_shows_the_bucketing(live_url: str) -> None:
    """status ROLE says the unit, the salt the rollout drew and the version; the fleet line
    marks a role bucketed by an attribute."""
    binding = requests.get(f"{live_url}/v1/bindings/summarizer", headers=auth(CALLER),
                           timeout=5).json()["binding"]
    out = run(live_url, "status", "summarizer").stdout
    assert f"  bucketing  by job key, salt {binding['salt']}, version 2\n" in out
    r = requests.put(f"{live_url}/v1/bindings/tenants", headers=auth(OPERATOR), timeout=5,
                     json={"current": "a", "candidate": "b", "stage": "canary", "share": 0.2,
                           "bucket_by": "tenant"})
    salt = r.json()["binding"]["salt"]
    assert f"  bucketing  by tenant, salt {salt}, version 2" in run(
        live_url, "status", "tenants").stdout
    fleet = run(live_url, "status").stdout.splitlines()
    assert any(line.startswith("tenants  canary 0.2 by tenant  v1") for line in fleet), fleet
    assert not any(" by " in line for line in fleet if line.startswith("summarizer"))


def test_status_says_who_paused_the_role(live_url: str) -> None:
    """A paused role's status names the operator and the reason."""
    move(live_url, "pause", reason="launch freeze")
    out = run(live_url, "status", "summarizer").stdout
    assert "PAUSED" in out and "paused by alice: launch freeze" in out


def test_status_of_a_rolled_back_role_keeps_the_failing_numbers(live_url: str) -> None:
    """After the tripwire's rollback, status shows the ended canary's failing candidate."""
    post_traces(live_url, "candidate", 1, start=50, tools=("web_write",))
    out = run(live_url, "status", "summarizer").stdout
    assert out.startswith("summarizer: rolled back")
    assert "rolled back by tripwire" in out
    assert "evidence of the stage it ended (canary 0.1" in out
    assert "candidate  cfg_b  fail  n=6" in out


def test_status_without_a_role_prints_one_line_per_role(live_url: str) -> None:
    """status with no ROLE prints a line per role with its stage and what comes next."""
    r = requests.put(f"{live_url}/v1/bindings/extractor", headers=auth(OPERATOR),
                     json={"current": "ext_a"}, timeout=5)
    assert r.status_code == 201
    lines = run(live_url, "status").stdout.splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("gatekeeper: no gatekeeper is running")
    assert lines[3].startswith("fleet: 1 rollout(s) live")
    assert lines[0].startswith("extractor  stable  v1") and "no rollout in progress" in lines[0]
    assert lines[1].startswith("summarizer  canary 0.1  v1  candidate insufficient_data n=5")
    assert "needs 15 more candidate runs" in lines[1]


def test_status_shows_fulls_holdback(live_url: str) -> None:
    """In full, status (the role and the one-line list) says how much stays on current."""
    r = requests.put(f"{live_url}/v1/bindings/summarizer", timeout=5,
                     headers={**auth(OPERATOR), "If-Match": "1"},
                     json={"current": "cfg_a", "candidate": "cfg_b", "stage": "full",
                           "share": 1.0, "holdback": 0.08, "gate": GATE})
    assert r.status_code == 200, r.text
    out = run(live_url, "status", "summarizer").stdout
    assert "  holdback   0.08 of bucketed jobs stay on current" in out, out
    line = run(live_url, "status").stdout.splitlines()[0]
    assert line.startswith("summarizer  full holdback 0.08  v2"), line
    move(live_url, "rollback")
    assert "holdback" not in run(live_url, "status", "summarizer").stdout


def test_status_json_is_the_gate_view(live_url: str) -> None:
    """--json prints the gate view, `next` section included."""
    view = json.loads(run(live_url, "status", "summarizer", "--json").stdout)
    assert view["next"]["waits"][0]["need"] == 20


def _read_until(stream: IO[str], text: str, timeout: float = 30.0) -> str:
    """Lines from `stream` until one contains `text`."""
    seen: list[str] = []
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} never appeared in:\n{''.join(seen)}")


def test_watch_redraws_when_the_numbers_change(live_url: str) -> None:
    """--watch draws the status, then draws it again once more traces arrive."""
    with spawn(live_url, "status", "summarizer", "--watch", "--interval", "0.1") as proc:
        try:
            assert proc.stdout is not None
            _read_until(proc.stdout, "needs 15 more candidate runs")
            post_traces(live_url, "candidate", 10, start=10)
            _read_until(proc.stdout, "needs 5 more candidate runs")
        finally:
            proc.terminate()
            proc.communicate(timeout=10)


@pytest.mark.slow
def test_wait_exits_0_when_the_candidate_becomes_stable(live_url: str) -> None:
    """--wait blocks through the rollout and exits 0 once the candidate is stable."""
    with spawn(live_url, "status", "summarizer", "--wait", "--timeout", "60s",
               "--interval", "0.1") as proc:
        assert proc.stdout is not None
        _read_until(proc.stdout, "summarizer  canary 0.1")
        move(live_url, "promote")
        move(live_url, "promote")
        move(live_url, "promote")
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert out.rstrip().endswith("summarizer: stable (current cfg_b)")


@pytest.mark.slow
def test_wait_exits_1_on_a_rollback(live_url: str) -> None:
    """--wait exits 1 when the candidate is rolled back."""
    with spawn(live_url, "status", "summarizer", "--wait", "--timeout", "60s",
               "--interval", "0.1") as proc:
        assert proc.stdout is not None
        _read_until(proc.stdout, "summarizer  canary 0.1")
        move(live_url, "rollback")
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "summarizer: rolled back" in out


def test_wait_exits_2_on_timeout(live_url: str) -> None:
    """--wait exits 2 when the rollout is still going at the timeout."""
    result = run(live_url, "status", "summarizer", "--wait", "--timeout", "0.3s",
                 "--interval", "0.1")
    assert result.exit_code == 2
    assert "still rolling out after 0.3s" in result.stderr


def test_watch_and_wait_need_a_role_and_a_duration(live_url: str) -> None:
    """--wait without ROLE and a malformed --timeout are usage errors (exit 2)."""
    assert run(live_url, "status", "--wait").exit_code == 2
    bad = run(live_url, "status", "summarizer", "--wait", "--timeout", "soon")
    assert bad.exit_code == 2 and "not a duration" in bad.stderr


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800), ("90s", 90), ("1h30m", 5400),
                                                ("45", 45), ("0.5s", 0.5)])
def test_duration_reads_units(text: str, seconds: float) -> None:
    """Durations read h, m, s and bare seconds, and combinations."""
    assert duration(text) == seconds
