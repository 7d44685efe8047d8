"""Comparing two suite results: paired flips with exact McNemar, trajectories, resources, steps."""

from __future__ import annotations

import pytest

from bindings.models import Invariants
from gatekeeper.suite.compare import compare_results
from gatekeeper.suite.records import RunRecord
from gatekeeper.suite.report import comparison_html, comparison_markdown
from gatekeeper.suite.verdict import ScenarioResult, SuiteResult
from rolegate.trace import Stamps, Trace

STAMPS = Stamps(agent_version="a", instruction_hash="i", model_id="m", tool_schema_hash="t")


def _run(scenario: str, repeat: int, passed: bool, tools: tuple[str, ...] = ("read_file",),
         latency: float = 1.0, tokens: int = 100) -> RunRecord:
    trace = Trace(run_id=f"{scenario}.{repeat}", role="offline", config="c", arm="candidate",
                  tools=tools, latency_s=latency, tokens=tokens, stamps=STAMPS)
    criteria = {"must_contain_table": passed}
    return RunRecord(scenario=scenario, repeat=repeat, run_id=trace.run_id, passed=passed,
                     trace=trace, checks={"passed": passed, "criteria": criteria})


def _result(config: str, runs: list[RunRecord], passed: bool = True,
            required: tuple[str, ...] = ()) -> SuiteResult:
    ids = sorted({r.scenario for r in runs})
    scenarios = [ScenarioResult(id=i, task=f"task of {i}", seed_files={"in.md": f"seed/{i}.md"},
                                invariants=Invariants(required_tools=required), planned=1,
                                passed=passed, gate={"verdict": "pass", "reasons": []})
                 for i in ids]
    return SuiteResult(suite="s", config=config, config_hash="h", agent="a", started_at=0,
                       finished_at=1, planned_runs=len(runs), completed_runs=len(runs),
                       passed=passed, suite_gate={}, scenarios=scenarios, runs=runs)


def _flips(regressions: int, improvements: int, same: int = 0) -> tuple[SuiteResult, SuiteResult]:
    base, cand = [], []
    outcomes = [(True, False)] * regressions + [(False, True)] * improvements + \
        [(True, True)] * same
    for i, (was, now) in enumerate(outcomes):
        base.append(_run("s", i, was))
        cand.append(_run("s", i, now))
    return _result("base", base), _result("cand", cand)


@pytest.mark.parametrize(("regressions", "improvements", "one_sided", "two_sided"), [
    (14, 5, 0.0318, 0.0636),
    (5, 0, 0.03125, 0.0625),
    (3, 3, 0.65625, 1.0),
])
def test_paired_flips_use_the_exact_mcnemar_test(regressions: int, improvements: int,
                                                 one_sided: float, two_sided: float) -> None:
    """Flips pair by (scenario, repeat) and give McNemar's exact p-values (14 against 5: 0.0318)."""
    base, cand = _flips(regressions, improvements, same=4)
    comparison = compare_results(base, cand)
    paired = comparison.paired
    assert paired["pairs"] == regressions + improvements + 4
    assert paired["flips"] == {"pass_to_fail": regressions, "fail_to_pass": improvements}
    assert paired["mcnemar"]["one_sided"] == pytest.approx(one_sided, abs=5e-5)
    assert paired["mcnemar"]["two_sided"] == pytest.approx(two_sided, abs=5e-5)
    assert comparison.passed is (one_sided >= 0.05)


def test_trajectory_histogram_and_regressed_scenarios_by_input() -> None:
    """Trajectory classes are counted per pair; a worse scenario is listed with its task and seeds."""
    base = _result("base", [_run("a", 0, True, ("read_file", "write_file")),
                            _run("b", 0, True, ("read_file", "write_file"))])
    cand = _result("cand", [_run("a", 0, False, ("read_file", "write_file", "read_file")),
                            _run("b", 0, True, ("write_file", "read_file"))])
    comparison = compare_results(base, cand)
    assert comparison.paired["trajectory"]["EXTRA_CALL"] == 1
    assert comparison.paired["trajectory"]["REORDERED"] == 1
    [regressed] = comparison.regressed
    assert regressed["id"] == "a" and regressed["task"] == "task of a"
    assert regressed["seed_files"] == {"in.md": "seed/a.md"}
    assert regressed["failed_criteria"] == {"must_contain_table": 1}
    assert "a" in comparison_markdown(comparison) and "<html>" in comparison_html(comparison)


def test_resource_ceilings_warn_at_latency_20_and_tokens_15_percent() -> None:
    """+25% latency and +16% tokens warn; +10% does not; warnings never block."""
    base = _result("base", [_run("s", 0, True, latency=1.0, tokens=100)])
    worse = _result("cand", [_run("s", 0, True, latency=1.25, tokens=116)])
    comparison = compare_results(base, worse)
    assert comparison.passed
    assert any("latency_s +25%" in w for w in comparison.warnings)
    assert any("tokens +16%" in w for w in comparison.warnings)
    fine = _result("cand", [_run("s", 0, True, latency=1.1, tokens=110)])
    assert not [w for w in compare_results(base, fine).warnings if "resource" in w]


def test_stable_steps_are_asserted_and_unstable_ones_only_warn() -> None:
    """A tool in every baseline run must stay; one in only some baseline runs just warns."""
    base = _result("base", [_run("s", 0, True, ("search", "verify", "answer")),
                            _run("s", 1, True, ("search", "verify", "cite", "answer")),
                            _run("s", 2, True, ("search", "verify", "answer"))])
    cand = _result("cand", [_run("s", 0, True, ("search", "answer")),
                            _run("s", 1, True, ("search", "verify", "answer")),
                            _run("s", 2, True, ("search", "verify", "answer", "extra"))])
    comparison = compare_results(base, cand)
    steps = comparison.stable_steps["s"]
    assert steps["stable"] == ["answer", "search", "verify"]
    assert steps["unstable"] == ["cite"]
    assert steps["missing"] == {"verify": 1}
    assert steps["new"] == {"extra": 1}
    assert not comparison.passed
    assert any("stable step 'verify'" in b for b in comparison.blocking)
    assert any("['cite'] appear in only some baseline runs" in w for w in comparison.warnings)


def test_a_lost_required_tool_blocks_through_the_shared_pairing() -> None:
    """A pair where the candidate drops a required tool blocks, as it does in shadow."""
    base = _result("base", [_run("s", 0, True, ("verify", "answer"))], required=("verify",))
    cand = _result("cand", [_run("s", 0, True, ("answer",))], required=("verify",))
    comparison = compare_results(base, cand)
    assert any("lost required tools ['verify']" in b for b in comparison.blocking)


def test_a_failed_candidate_gate_blocks_the_comparison() -> None:
    """The candidate's own deterministic gate comes first."""
    base = _result("base", [_run("s", 0, True)])
    cand = _result("cand", [_run("s", 0, True)], passed=False)
    assert not compare_results(base, cand).passed
