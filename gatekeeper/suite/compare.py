"""Baseline against candidate over the same scenarios: flips, trajectories, resources, stable steps.

Pure: two `SuiteResult`s in, a `SuiteComparison` out. Runs pair by (scenario,
repeat) and go through `gatekeeper.stats.pairing`, the same flip counting, exact
McNemar test and trajectory histogram the shadow stage uses. Resource ceilings
are warnings (+20% latency, +15% tokens). The stable-step analysis (record
several runs, assert only what is stable): across the baseline's N recordings of a
scenario, the tools present in every run are asserted in the candidate's runs,
the rest only warn.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from gatekeeper.stats.pairing import Run, pair_runs
from gatekeeper.stats.pairing import compare as paired_compare
from gatekeeper.suite.by_criterion import criterion_comparison
from gatekeeper.suite.records import RunRecord
from gatekeeper.suite.verdict import SuiteResult

LATENCY_WARN = 0.20
TOKENS_WARN = 0.15
#: The resources compared, with the relative increase that warns (None: report only).
RESOURCES: dict[str, float | None] = {
    "latency_s": LATENCY_WARN, "tokens": TOKENS_WARN, "cost_usd": None, "step_count": None,
}


@dataclass(frozen=True)
class SuiteComparison:
    """Everything `rolegate suite compare` reports, and whether the candidate may go on."""

    baseline: str
    candidate: str
    passed: bool
    blocking: list[str]
    warnings: list[str]
    paired: dict[str, Any]
    regressed: list[dict[str, Any]]
    resources: dict[str, dict[str, float | None]]
    stable_steps: dict[str, dict[str, Any]]
    judge: dict[str, Any] | None = None
    candidate_gate: dict[str, Any] = field(default_factory=dict)
    #: Pass rates per criterion key per config, and regressions named by key (issue 8).
    by_criterion: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "baseline": self.baseline, "candidate": self.candidate, "passed": self.passed,
            "blocking": self.blocking, "warnings": self.warnings, "paired": self.paired,
            "regressed_scenarios": self.regressed, "resources": self.resources,
            "stable_steps": self.stable_steps, "judge": self.judge,
            "candidate_gate": self.candidate_gate, "by_criterion": self.by_criterion,
        }


def _runs(result: SuiteResult) -> list[Run]:
    # The trajectory, not the raw tools: a parallel group compares as a set.
    return [Run(key=f"{r.scenario}#{r.repeat}", passed=r.passed,
                tools=r.trace.trajectory() if r.trace is not None else (),
                tool_error=bool(r.trace and r.trace.tool_errors),
                forbidden_call=bool(r.checks.get("forbidden"))) for r in result.runs]


def _mean(records: list[RunRecord], name: str) -> float | None:
    values = [float(getattr(r.trace, name)) for r in records if r.trace is not None]
    return fmean(values) if values else None


def resource_deltas(base: SuiteResult, cand: SuiteResult) -> tuple[dict[str, dict[str, float | None]],
                                                                     list[str]]:
    """Mean latency, tokens, cost and steps per run on each side, their change, and warnings."""
    out: dict[str, dict[str, float | None]] = {}
    warnings: list[str] = []
    for name, ceiling in RESOURCES.items():
        before, after = _mean(base.runs, name), _mean(cand.runs, name)
        delta = (after - before) / before if before and after is not None else None
        out[name] = {"baseline": before, "candidate": after, "change": delta}
        if ceiling is not None and delta is not None and delta > ceiling:
            warnings.append(f"resource ceiling: mean {name} +{delta:.0%} "
                            f"({before:.4g} -> {after:.4g}) exceeds +{ceiling:.0%}")
    return out, warnings


def stable_steps(base_runs: list[RunRecord], cand_runs: list[RunRecord]) -> dict[str, Any]:
    """Tools in every baseline run (asserted), in some (warned), and how the candidate fared."""
    seen = [set(r.tools) for r in base_runs if r.trace is not None]
    if not seen:
        return {"recordings": 0, "stable": [], "unstable": [], "missing": {}, "new": {}}
    stable = set.intersection(*seen)
    union = set.union(*seen)
    missing: Counter[str] = Counter()
    new: Counter[str] = Counter()
    for run in cand_runs:
        if run.trace is None:
            continue
        missing.update(stable - set(run.tools))
        new.update(set(run.tools) - union)
    return {"recordings": len(seen), "stable": sorted(stable), "unstable": sorted(union - stable),
            "missing": dict(sorted(missing.items())), "new": dict(sorted(new.items())),
            "candidate_runs": sum(1 for r in cand_runs if r.trace is not None)}


def _rate(runs: list[RunRecord]) -> float | None:
    return sum(r.passed for r in runs) / len(runs) if runs else None


def _failed_criteria(runs: list[RunRecord]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for run in runs:
        counts.update(k for k, held in run.checks.get("criteria", {}).items() if held is False)
    return dict(sorted(counts.items()))


def regressed_scenarios(base: SuiteResult, cand: SuiteResult) -> list[dict[str, Any]]:
    """Scenarios the candidate does worse on, listed by their input (task, seed files)."""
    base_by_id = {s.id: s for s in base.scenarios}
    out = []
    for scenario in cand.scenarios:
        before = base_by_id.get(scenario.id)
        if before is None:
            continue
        base_rate, cand_rate = _rate(base.runs_of(scenario.id)), _rate(cand.runs_of(scenario.id))
        worse_rate = base_rate is not None and cand_rate is not None and cand_rate < base_rate
        if worse_rate or (before.passed and not scenario.passed):
            out.append({
                "id": scenario.id, "task": scenario.task, "seed_files": scenario.seed_files,
                "tags": list(scenario.tags),
                "baseline_pass_rate": base_rate, "candidate_pass_rate": cand_rate,
                "failed_criteria": _failed_criteria(cand.runs_of(scenario.id)),
                "gate_reasons": [r["message"] for r in scenario.gate.get("reasons", [])],
            })
    return out


def compare_results(base: SuiteResult, cand: SuiteResult, *, alpha: float = 0.05,
                    judge: dict[str, Any] | None = None) -> SuiteComparison:
    """Compare a candidate's suite result with a baseline's on the same scenarios."""
    blocking: list[str] = []
    warnings: list[str] = []
    if not cand.passed:
        blocking.extend(f"candidate gate: {reason}" for reason in cand.reasons or
                        ["the candidate failed its own suite gate"])
    required = sorted({tool for s in cand.scenarios for tool in s.invariants.required_tools})
    report = paired_compare(pair_runs(_runs(base), _runs(cand)), alpha=alpha, min_samples=1,
                            required_tools=required)
    if report.verdict == "fail":
        blocking.extend(f"paired: {reason}" for reason in report.reasons)
    resources, resource_warnings = resource_deltas(base, cand)
    warnings.extend(resource_warnings)
    steps: dict[str, dict[str, Any]] = {}
    for scenario in cand.scenarios:
        analysis = stable_steps(base.runs_of(scenario.id), cand.runs_of(scenario.id))
        steps[scenario.id] = analysis
        for tool, count in analysis["missing"].items():
            blocking.append(f"{scenario.id}: stable step {tool!r} (in all "
                            f"{analysis['recordings']} baseline runs) missing in {count} "
                            f"of {analysis['candidate_runs']} candidate runs")
        for tool, count in analysis["new"].items():
            warnings.append(f"{scenario.id}: new step {tool!r} in {count} candidate runs")
        if analysis["unstable"]:
            warnings.append(f"{scenario.id}: steps {analysis['unstable']} appear in only some "
                            "baseline runs; not asserted")
    by_criterion = criterion_comparison(base, cand)
    warnings.extend(f"criterion {r['key']}: {r['message']}" for r in by_criterion["regressions"])
    if judge is not None:
        blocking.extend(f"judge: {reason}" for reason in judge.get("blocking", []))
        warnings.extend(f"judge: {w}" for w in judge.get("warnings", []))
    return SuiteComparison(
        baseline=base.config, candidate=cand.config, passed=not blocking, blocking=blocking,
        warnings=warnings, paired=report.as_dict(), regressed=regressed_scenarios(base, cand),
        resources=resources, stable_steps=steps, judge=judge,
        candidate_gate={"passed": cand.passed, "reasons": cand.reasons},
        by_criterion=by_criterion,
    )
