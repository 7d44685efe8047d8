"""`rolegate suite run|compare` from the command line: reports, exit codes, --post to a live router."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from flask import Flask

from router.cli import main
from tests.conftest import GATEKEEPER, OPERATOR, auth
from tests.servers import werkzeug_server
from tests.suite_support import EXAMPLE_AGENT, EXAMPLES

SUITE = str(EXAMPLES / "suite")
GOOD = str(EXAMPLES / "configs" / "cfg_good.json")
REGRESSED = str(EXAMPLES / "configs" / "cfg_regressed.json")


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["suite", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_good_config_passes_with_exit_0_and_writes_three_reports(tmp_path: Path) -> None:
    """A passing suite exits 0 and writes results.json, summary.md and a self-contained report."""
    code, out, _ = _run("run", SUITE, "--config", GOOD, "--agent", EXAMPLE_AGENT,
                        "--repeats", "1", "--quiet", "--out", str(tmp_path))
    assert code == 0, out
    assert "cfg_2026_07_01 PASSED" in out
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["passed"] is True and stored["completed_runs"] == 3
    assert (tmp_path / "summary.md").read_text().startswith("# Offline suite")
    page = (tmp_path / "report.html").read_text()
    assert "<style>" in page and "<script" not in page and "src=" not in page


def test_regressed_config_fails_the_gate_with_exit_1_for_the_right_reason(tmp_path: Path) -> None:
    """The table-collapsing config fails on must_contain_table in the tables scenario."""
    code, out, _ = _run("run", SUITE, "--config", REGRESSED, "--agent", EXAMPLE_AGENT,
                        "--repeats", "1", "--quiet", "--out", str(tmp_path))
    assert code == 1
    assert "summarize-keep-tables-001 | must_contain_table | 0/1" in out
    assert "- summarize-keep-tables-001: pass rate 0.000" in out


def test_errors_exit_2(tmp_path: Path) -> None:
    """Conflicting flags, --post without --role, a bad scenario file and a bad policy exit 2."""
    base = ["run", SUITE, "--config", GOOD, "--agent", EXAMPLE_AGENT, "--quiet",
            "--out", str(tmp_path)]
    code, _, err = _run(*base, "--repeats", "2", "--weight", "minor")
    assert code == 2 and "--repeats or --weight" in err
    code, _, err = _run(*base, "--post")
    assert code == 2 and "--post needs --role" in err
    bad = tmp_path / "bad"
    (bad / "scenarios").mkdir(parents=True)
    (bad / "scenarios" / "x.json").write_text('{"id": "x", "task": "t", "repeats": "many"}')
    code, _, err = _run("run", str(bad), "--config", GOOD, "--agent", EXAMPLE_AGENT)
    assert code == 2 and "x.json: repeats" in err
    policy = tmp_path / "policy.json"
    policy.write_text('{"thresholds": {"min_pass_rate": 2}}')
    code, _, err = _run(*base, "--policy", str(policy))
    assert code == 2 and "min_pass_rate" in err


def test_compare_stored_results_exits_1_on_a_regression(tmp_path: Path) -> None:
    """compare over stored results blocks the regressed config, listed by input; run --baseline warns."""
    for name, config in (("good", GOOD), ("bad", REGRESSED)):
        _run("run", SUITE, "--config", config, "--agent", EXAMPLE_AGENT, "--quiet",
             "--weight", "minor", "--out", str(tmp_path / name))
    code, out, _ = _run("compare", str(tmp_path / "good"), str(tmp_path / "bad" / "results.json"),
                        "--out", str(tmp_path / "cmp"))
    assert code == 1
    assert "pass->fail 3, fail->pass 0" in out
    assert "EXTRA_CALL 9" in out
    assert "**summarize-keep-tables-001** (100% -> 0%)" in out
    code, out, _ = _run("compare", str(tmp_path / "good"), str(tmp_path / "good"),
                        "--out", str(tmp_path / "same"))
    assert code == 0 and "may proceed" in out
    code, _, err = _run("compare", str(tmp_path / "good"), REGRESSED)
    assert code == 2 and "--suite and --agent" in err
    code, out, _ = _run("run", SUITE, "--config", REGRESSED, "--agent", EXAMPLE_AGENT, "--quiet",
                        "--repeats", "1", "--baseline", str(tmp_path / "good"),
                        "--out", str(tmp_path / "warned"))
    assert code == 1 and "- resource ceiling: mean tokens +" in out


def test_post_sends_the_verdict_and_unlocks_shadow(app: Flask, tmp_path: Path) -> None:
    """--post stores the verdict for (role, config) on a live router; then shadow is allowed."""
    client = app.test_client()
    binding = {"current": "cfg_2026_07_01", "candidate": "cfg_2026_07_06",
               "gate": {"require_offline_pass": True}}
    assert client.put("/v1/bindings/summarizer", json=binding,
                      headers=auth(OPERATOR)).status_code == 201
    with werkzeug_server(app) as url:
        code, _, err = _run("run", SUITE, "--config", REGRESSED, "--agent", EXAMPLE_AGENT,
                            "--repeats", "1", "--quiet", "--out", str(tmp_path / "r"),
                            "--post", "--role", "summarizer", "--url", url,
                            "--token", GATEKEEPER)
    assert code == 1 and "posted verdict for role summarizer" in err
    stored = client.get("/v1/roles/summarizer/offline/cfg_2026_07_06",
                        headers=auth(OPERATOR)).json
    assert stored["verdict"]["passed"] is False
    r = client.post("/v1/bindings/summarizer/promote", json={"reason": "try"},
                    headers=auth(GATEKEEPER))
    assert r.status_code == 409 and "suite failed" in r.json["error"]["message"]


def test_post_to_an_unreachable_router_exits_2(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A --post that cannot reach the router is an error, not a silent success."""
    monkeypatch.setenv("ROLEGATE_RETRY_NO_WAIT", "1")
    code, _, err = _run("run", SUITE, "--config", GOOD, "--agent", EXAMPLE_AGENT,
                        "--repeats", "1", "--quiet", "--out", str(tmp_path), "--post",
                        "--role", "summarizer", "--url", "http://127.0.0.1:9")
    assert code == 2 and "cannot reach rolegate" in err
