"""Record and replay: fixtures with schema hashes, no live fallback, loud schema drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from gatekeeper.suite.records import RunOptions
from gatekeeper.suite.replay import SchemaDrift, ToolProxy, fixture_path, load_fixtures
from gatekeeper.suite.runner import SuiteRunner
from gatekeeper.suite.scenario import load_suite
from tests.suite_support import AGENT, CountingTool, counting_tool, make_config, make_suite

__all__ = ["counting_tool"]


def _suite(root: Path, url: str) -> None:
    make_suite(root, [{"id": "s1", "task": "t", "repeats": 2}], tools={
        "lookup": {"kind": "http", "url": url,
                   "parameters": {"required": ["q"], "properties": {"q": {"type": "string"}}}},
    })


def test_record_then_replay_serves_the_recording_without_the_live_tool(
        tmp_path: Path, counting_tool: CountingTool) -> None:
    """--record saves calls with schema hashes; --replay answers them with no live call."""
    _suite(tmp_path / "suite", counting_tool.url)
    suite = load_suite(tmp_path / "suite")
    config = make_config(tmp_path, "cfg", report_answers=True, calls=[["lookup", {"q": "a"}]])
    fixtures = tmp_path / "fixtures"
    recorded = SuiteRunner(suite, config, AGENT, RunOptions(record_dir=fixtures),
                           progress=None).run()
    assert counting_tool.calls == 2
    saved = json.loads(fixture_path(fixtures, "s1", 0).read_text())
    assert saved["tool_schemas"] == suite.tools.schema_hashes()
    assert saved["calls"][0]["tool"] == "lookup" and saved["calls"][0]["result"]["sent"]
    replayed = SuiteRunner(suite, config, AGENT, RunOptions(replay_dir=fixtures),
                           progress=None).run()
    assert counting_tool.calls == 2
    assert all(r.passed for r in replayed.records)
    for before, after in zip(recorded.records, replayed.records):
        assert after.trace is not None and before.trace is not None
        assert after.trace.output_text == before.trace.output_text


def test_a_call_with_no_recorded_match_fails_the_run(
        tmp_path: Path, counting_tool: CountingTool) -> None:
    """Different arguments miss the fixture: an error for the agent, the run fails, no live call."""
    _suite(tmp_path / "suite", counting_tool.url)
    suite = load_suite(tmp_path / "suite")
    fixtures = tmp_path / "fixtures"
    SuiteRunner(suite, make_config(tmp_path, "rec", calls=[["lookup", {"q": "a"}]]), AGENT,
                RunOptions(record_dir=fixtures), progress=None).run()
    live_calls = counting_tool.calls
    other = make_config(tmp_path, "other", report_answers=True,
                        calls=[["lookup", {"q": "b"}]])
    run = SuiteRunner(suite, other, AGENT, RunOptions(replay_dir=fixtures), progress=None).run()
    assert counting_tool.calls == live_calls
    for record in run.records:
        assert not record.passed
        assert record.replay_misses == ("lookup",)
        assert record.checks["criteria"]["replay_match"] is False
        assert record.trace is not None
        assert json.loads(record.trace.output_text)[0]["error"].startswith("replay miss")


def test_a_changed_tool_schema_fails_loudly(tmp_path: Path, counting_tool: CountingTool) -> None:
    """A tool whose schema hash differs from the fixture's refuses the replay before any run."""
    _suite(tmp_path / "suite", counting_tool.url)
    suite = load_suite(tmp_path / "suite")
    fixtures = tmp_path / "fixtures"
    SuiteRunner(suite, make_config(tmp_path, "rec", calls=[["lookup", {"q": "a"}]]), AGENT,
                RunOptions(record_dir=fixtures), progress=None).run()
    catalog = json.loads((tmp_path / "suite" / "tools.json").read_text())
    catalog["tools"]["lookup"]["parameters"]["required"] = ["q", "limit"]
    (tmp_path / "suite" / "tools.json").write_text(json.dumps(catalog))
    drifted = load_suite(tmp_path / "suite")
    with pytest.raises(SchemaDrift) as caught:
        load_fixtures(fixtures, drifted.tools)
    assert caught.value.details["tool"] == "lookup"
    with pytest.raises(SchemaDrift, match="tool 'lookup' schema hash"):
        SuiteRunner(drifted, make_config(tmp_path, "x"), AGENT, RunOptions(replay_dir=fixtures),
                    progress=None)


def test_proxy_refuses_calls_for_unknown_runs() -> None:
    """A call under a run id that is not attached gets 404, never a tool answer."""
    with ToolProxy() as proxy, requests.Session() as http:
        answer = http.post(f"{proxy.url}/runs/nope/tools/lookup", json={}, timeout=5)
        assert answer.status_code == 404
        assert answer.json() == {"error": "no such run or path"}
