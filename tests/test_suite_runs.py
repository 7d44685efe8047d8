"""Suite runs end to end: fresh workspaces, repeats, budgets, timeouts, eval-mode isolation."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bindings.models import GatePolicy
from gatekeeper.suite.isolation import PLACEHOLDER_PREFIX
from gatekeeper.suite.records import RunOptions
from gatekeeper.suite.runner import SuiteRunner
from gatekeeper.suite.verdict import evaluate_run
from tests.suite_support import AGENT, CountingTool, counting_tool, make_config, make_suite

__all__ = ["counting_tool"]

SEEDS = {"seed/a.md": "seed text\n"}


def _scenario(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {"id": "s1", "seed_files": {"input/a.md": "seed/a.md"},
                               "task": "t", "repeats": 3,
                               "invariants": {"artifact_exists": ["out/result.md"]}}
    return {**base, **overrides}


def test_each_run_gets_a_fresh_workspace_with_only_its_seed_files(tmp_path: Path) -> None:
    """A file written by one run is absent from the next; seeds are there; workspaces are removed."""
    suite = make_suite(tmp_path / "suite", [_scenario()], seeds=SEEDS)
    config = make_config(tmp_path, "cfg", report_answers=True, report_env=["ROLEGATE_WORKSPACE"],
                         calls=[["list_files", {}],
                                ["write_file", {"path": "out/result.md", "content": "x"}]])
    run = SuiteRunner(suite, config, AGENT, RunOptions(parallel=1), progress=None).run()
    assert len(run.records) == 3
    places = set()
    for record in run.records:
        assert record.trace is not None
        where, answers = record.trace.output_text.split("\n", 1)
        places.add(where)
        # Each run had its own directory, and none outlives the suite.
        assert not Path(where.removeprefix("ROLEGATE_WORKSPACE=")).exists()
        listed = json.loads(answers)[0]["result"]["files"]
        assert listed == ["input/a.md"]
        assert record.trace.artifacts == ("input/a.md", "out/result.md")
    assert len(places) == 3


def test_writes_outside_the_workspace_are_refused(tmp_path: Path) -> None:
    """A write to '../' or an absolute path fails the call and creates nothing outside."""
    suite = make_suite(tmp_path / "suite", [_scenario(repeats=1)], seeds=SEEDS)
    outside = tmp_path / "escaped.txt"
    config = make_config(tmp_path, "cfg", calls=[
        ["write_file", {"path": "../../../../../../" + str(outside), "content": "x"}],
        ["write_file", {"path": str(outside), "content": "x"}],
    ])
    run = SuiteRunner(suite, config, AGENT, RunOptions(), progress=None).run()
    steps = run.records[0].trace.steps  # type: ignore[union-attr]
    assert steps is not None and all(s.error for s in steps)
    assert not outside.exists()


def test_repeats_flag_runs_each_scenario_that_often_with_unique_run_ids(tmp_path: Path) -> None:
    """--repeats N overrides the file; every run is a new run (never a cached one)."""
    suite = make_suite(tmp_path / "suite", [_scenario(), _scenario(id="s2")], seeds=SEEDS)
    config = make_config(tmp_path, "cfg")
    run = SuiteRunner(suite, config, AGENT, RunOptions(repeats=4, parallel=4),
                      progress=None).run()
    assert run.planned == {"s1": 4, "s2": 4}
    assert sorted((r.scenario, r.repeat) for r in run.records) == \
        [(s, i) for s in ("s1", "s2") for i in range(4)]
    assert len({r.run_id for r in run.records}) == 8


def test_max_runs_budget_stops_cleanly_and_says_so(tmp_path: Path) -> None:
    """With max runs 3 of 6, three runs happen, the rest are reported as not started."""
    suite = make_suite(tmp_path / "suite", [_scenario(), _scenario(id="s2")], seeds=SEEDS)
    config = make_config(tmp_path, "cfg", calls=[["write_file", {"path": "out/result.md",
                                                                 "content": "x"}]])
    run = SuiteRunner(suite, config, AGENT, RunOptions(max_runs=3, parallel=2),
                      progress=None).run()
    assert len(run.records) == 3
    assert run.stopped == "budget: max runs 3 reached; 3 of 6 runs not started"
    # Interleaved by repeat: both scenarios ran before the budget bit.
    assert {r.scenario for r in run.records} == {"s1", "s2"}
    result = evaluate_run(run, GatePolicy(), AGENT)
    assert not result.passed
    assert result.reasons[0].startswith("suite incomplete: budget: max runs 3")


def test_max_cost_budget_stops_new_runs(tmp_path: Path) -> None:
    """Once the spent cost reaches max cost, no further run starts."""
    suite = make_suite(tmp_path / "suite", [_scenario(repeats=5)], seeds=SEEDS)
    config = make_config(tmp_path, "cfg", cost_usd=0.02)
    run = SuiteRunner(suite, config, AGENT, RunOptions(max_cost_usd=0.05, parallel=1),
                      progress=None).run()
    assert len(run.records) == 3
    assert run.stopped is not None and "max cost $0.05" in run.stopped


def test_a_run_over_its_timeout_is_killed_and_fails(tmp_path: Path) -> None:
    """A run past --timeout fails with a timeout error instead of hanging the suite."""
    suite = make_suite(tmp_path / "suite", [_scenario(repeats=1)], seeds=SEEDS)
    config = make_config(tmp_path, "cfg", sleep=5)
    run = SuiteRunner(suite, config, AGENT, RunOptions(timeout_s=0.5), progress=None).run()
    record = run.records[0]
    assert not record.passed and record.trace is None
    assert record.error == "timed out after 0.5 s"
    assert record.checks["criteria"] == {"agent_ok": False}


def test_a_timeout_kills_the_agents_children_too(tmp_path: Path) -> None:
    """A shell wrapper's child holding the pipes is killed with it; the suite does not wait."""
    suite = make_suite(tmp_path / "suite", [_scenario(repeats=1)], seeds=SEEDS)
    config = make_config(tmp_path, "cfg")
    started = time.monotonic()
    run = SuiteRunner(suite, config, "/bin/sh -c 'sleep 30; echo {}'", RunOptions(timeout_s=0.3),
                      progress=None).run()
    assert time.monotonic() - started < 10
    assert run.records[0].error == "timed out after 0.3 s"


def test_crashing_agent_and_bad_output_fail_the_run(tmp_path: Path) -> None:
    """A non-zero exit or a stdout that is not a JSON object fails the run with the reason."""
    suite = make_suite(tmp_path / "suite", [_scenario(repeats=1)], seeds=SEEDS)
    crashed = SuiteRunner(suite, make_config(tmp_path, "crash", exit=3), AGENT, RunOptions(),
                          progress=None).run().records[0]
    assert crashed.error is not None and crashed.error.startswith("exited with status 3")
    garbled = SuiteRunner(suite, make_config(tmp_path, "garbled", raw_stdout="hello"), AGENT,
                          RunOptions(), progress=None).run().records[0]
    assert garbled.error is not None and garbled.error.startswith("stdout is not a JSON object")


def test_gate_fails_the_scenario_on_one_forbidden_call(tmp_path: Path) -> None:
    """A forbidden tool in one run of five fails the scenario whatever the pass rate."""
    suite = make_suite(tmp_path / "suite", [_scenario(
        repeats=5, invariants={"forbidden_tools": ["web_write"]})], seeds=SEEDS,
        tools={"web_write": {"kind": "static", "result": "ok"}})
    good = make_config(tmp_path, "good")
    result = evaluate_run(SuiteRunner(suite, good, AGENT, RunOptions(), progress=None).run(),
                          GatePolicy(), AGENT)
    assert result.passed and result.scenarios[0].gate["verdict"] == "pass"
    bad = make_config(tmp_path, "bad", calls=[["web_write", {}]])
    runner = SuiteRunner(suite, bad, AGENT, RunOptions(), progress=None)
    run = runner.run()
    result = evaluate_run(run, GatePolicy(), AGENT)
    assert not result.passed
    gate = result.scenarios[0].gate
    assert gate["forbidden_rate"] == 1.0
    assert [r["code"] for r in gate["reasons"]][0] == "forbidden_rate"


def test_an_unanswered_run_fails_the_scenario_under_answered(tmp_path: Path) -> None:
    """Runs reporting answered: false fail under the `answered` key, as they do online."""
    suite = make_suite(tmp_path / "suite", [_scenario(repeats=2)], seeds=SEEDS)
    config = make_config(tmp_path, "silent", answered=False,
                         calls=[["write_file", {"path": "out/result.md", "content": "x"}]])
    result = evaluate_run(SuiteRunner(suite, config, AGENT, RunOptions(), progress=None).run(),
                          GatePolicy(), AGENT)
    assert not result.passed
    gate = result.scenarios[0].gate
    assert gate["criteria"]["answered"] == {"passes": 0, "n": 2, "pass_rate": 0.0}
    assert gate["criteria"]["artifact_exists"]["pass_rate"] == 1.0
    assert [r["code"] for r in gate["reasons"]] == ["pass_rate"]


def test_gate_reports_pass_rate_per_criterion_and_p95_steps(tmp_path: Path) -> None:
    """The scenario gate reads p95 steps against max_steps and counts each criterion."""
    suite = make_suite(tmp_path / "suite", [_scenario(
        repeats=2, invariants={"max_steps": 1, "artifact_exists": ["out/result.md"]})],
        seeds=SEEDS)
    config = make_config(tmp_path, "cfg", calls=[["list_files", {}], ["list_files", {}]])
    result = evaluate_run(SuiteRunner(suite, config, AGENT, RunOptions(),
                                      progress=None).run(), GatePolicy(), AGENT)
    gate = result.scenarios[0].gate
    assert gate["criteria"]["max_steps"] == {"passes": 0, "n": 2, "pass_rate": 0.0}
    assert gate["criteria"]["artifact_exists"]["passes"] == 0
    assert {r["code"] for r in gate["reasons"]} == {"pass_rate", "p95_steps"}


def test_side_effecting_tool_is_never_executed_in_eval_mode(
        tmp_path: Path, counting_tool: CountingTool) -> None:
    """In eval mode the real tool's call counter stays at 0; the call is intercepted and traced."""
    tools = {"send_message": {"kind": "http", "url": counting_tool.url, "side_effecting": True,
                              "synthesized": {"ok": True, "message_id": "eval"}}}
    suite = make_suite(tmp_path / "suite", [_scenario(repeats=3)], seeds=SEEDS, tools=tools)
    config = make_config(tmp_path, "cfg", report_answers=True,
                         calls=[["send_message", {"to": "owner", "text": "hi"}]])
    run = SuiteRunner(suite, config, AGENT, RunOptions(), progress=None).run()
    assert counting_tool.calls == 0
    for record in run.records:
        assert record.intercepted == ("send_message",)
        assert record.trace is not None and record.trace.steps is not None
        step = record.trace.steps[0]
        assert step.result == {"intercepted": True, "result": {"ok": True, "message_id": "eval"}}
        assert json.loads(record.trace.output_text) == [
            {"result": {"ok": True, "message_id": "eval"}}]
    # The same suite in live mode does execute it: the counter is a real one.
    SuiteRunner(suite, config, AGENT, RunOptions(repeats=1, eval_mode=False),
                progress=None).run()
    assert counting_tool.calls == 1


def test_eval_mode_hands_out_placeholder_credentials(
        tmp_path: Path, counting_tool: CountingTool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent sees placeholders, never a real secret or the router token; tools get them too."""
    monkeypatch.setenv("REAL_CHAT_TOKEN", "s3cret-real")
    monkeypatch.setenv("ROLEGATE_TOKEN", "router-token")
    tools = {"lookup": {"kind": "http", "url": counting_tool.url, "credential": "CHAT_TOKEN"}}
    suite = make_suite(tmp_path / "suite", [_scenario(repeats=1)], seeds=SEEDS, tools=tools,
                       credentials={"CHAT_TOKEN": "REAL_CHAT_TOKEN"})
    config = make_config(tmp_path, "cfg", report_env=["CHAT_TOKEN", "REAL_CHAT_TOKEN",
                                                      "ROLEGATE_TOKEN"],
                         calls=[["lookup", {"q": "x"}]])
    record = SuiteRunner(suite, config, AGENT, RunOptions(), progress=None).run().records[0]
    assert record.trace is not None
    text = record.trace.output_text
    assert f"CHAT_TOKEN={PLACEHOLDER_PREFIX}" in text
    assert "REAL_CHAT_TOKEN=\n" in text and "s3cret-real" not in text
    assert "ROLEGATE_TOKEN=\n" in text
    assert counting_tool.calls == 1
    assert counting_tool.authorization[0] is not None
    assert counting_tool.authorization[0].startswith(f"Bearer {PLACEHOLDER_PREFIX}")


def test_steps_come_from_the_proxy_not_from_the_agent(tmp_path: Path) -> None:
    """An agent cannot hide a call: the trace's steps are what the proxy answered."""
    suite = make_suite(tmp_path / "suite", [_scenario(
        repeats=1, invariants={"forbidden_tools": ["web_write"]})], seeds=SEEDS,
        tools={"web_write": {"kind": "static", "result": "ok"}})
    config = make_config(tmp_path, "cfg", calls=[["web_write", {}]],
                         raw_stdout=json.dumps({"steps": [], "output_text": "clean"}))
    record = SuiteRunner(suite, config, AGENT, RunOptions(), progress=None).run().records[0]
    assert record.trace is not None and record.trace.tools == ("web_write",)
    assert record.checks["forbidden"] == ["web_write"]
