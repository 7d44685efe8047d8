"""The suite's verdict: the online gate's own code, per scenario and for the whole suite.

Each run was checked by `gatekeeper.checks.invariants.check` (the same per-trace checks
as production); here the runs fold into `WindowStats` and go through
`gatekeeper.gate.evaluate`, so the offline lane and the online lane compute the
same figures. Offline, `min_samples` is the number of planned
repeats: a suite the budget cut short has insufficient data and cannot pass.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from bindings.models import GatePolicy, Invariants
from gatekeeper.checks.invariants import TraceVerdict
from gatekeeper.gate import evaluate
from gatekeeper.suite.records import RunRecord, SuiteRun
from gatekeeper.suite.scenario import Scenario
from gatekeeper.window import WindowStats
from rolegate.trace import Stamps, Trace

RESULT_FORMAT: Final = "rolegate-suite-result/1"


class ScenarioResult(BaseModel):
    """One scenario's inputs (so a regression is listed by input) and its gate verdict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    task: str
    seed_files: dict[str, str]
    tags: tuple[str, ...] = ()
    expected: str | None = None
    invariants: Invariants = Field(default_factory=Invariants)
    planned: int
    passed: bool
    #: `gatekeeper.gate.Verdict.to_json()`: verdict, reasons and every figure.
    gate: dict[str, Any]


class SuiteResult(BaseModel):
    """A suite run's stored result: what ran, what it found, and the verdict."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["rolegate-suite-result/1"] = RESULT_FORMAT
    suite: str
    config: str
    config_hash: str
    agent: str
    started_at: float
    finished_at: float
    planned_runs: int
    completed_runs: int
    stopped: str | None = None
    eval_mode: bool = True
    replayed: bool = False
    passed: bool
    reasons: list[str] = Field(default_factory=list)
    #: Things worth a look that do not fail the gate (e.g. resource ceilings against a baseline).
    warnings: list[str] = Field(default_factory=list)
    suite_gate: dict[str, Any]
    scenarios: list[ScenarioResult]
    runs: list[RunRecord]

    def runs_of(self, scenario: str) -> list[RunRecord]:
        """The runs of one scenario, by repeat."""
        return sorted((r for r in self.runs if r.scenario == scenario), key=lambda r: r.repeat)


def _stand_in(record: RunRecord, config: str) -> Trace:
    """The trace counted for a run whose agent handed none back: unanswered, no tools."""
    unknown = Stamps(agent_version="unknown", instruction_hash="unknown", model_id="unknown",
                     tool_schema_hash="unknown")
    return Trace(run_id=record.run_id, role="offline", config=config, arm="candidate",
                 answered=False, stamps=unknown, scenario=record.scenario)


def window_of(records: list[RunRecord], config: str) -> WindowStats:
    """Fold runs into a window from their stored checks (no re-checking)."""
    window = WindowStats()
    for record in records:
        trace = record.trace or _stand_in(record, config)
        window.add(trace, TraceVerdict.from_json(record.checks))
    return window


def scenario_policy(base: GatePolicy, scenario: Scenario | None, planned: int) -> GatePolicy:
    """The policy one scenario (or, with None, the whole suite) is judged by."""
    data = base.model_dump()
    thresholds = data["thresholds"]
    thresholds["min_samples"] = max(1, planned)
    if scenario is not None:
        data["invariants"] = scenario.invariants.model_dump()
        if thresholds["p95_step_ceiling"] is None:
            # With no ceiling set: p95 steps against the scenario's own step ceiling.
            thresholds["p95_step_ceiling"] = scenario.invariants.max_steps or None
    else:
        data["invariants"] = Invariants().model_dump()
    return GatePolicy.model_validate(data)


def evaluate_run(run: SuiteRun, policy: GatePolicy, agent: str) -> SuiteResult:
    """Judge a finished suite run: per scenario, then the suite as a whole."""
    reasons: list[str] = []
    scenarios: list[ScenarioResult] = []
    total = WindowStats()
    for scenario in run.suite.scenarios:
        records = [r for r in run.records if r.scenario == scenario.id]
        window = window_of(records, run.config.name)
        total = total.merge(window)
        planned = run.planned.get(scenario.id, 0)
        verdict = evaluate(window, scenario_policy(policy, scenario, planned))
        reasons.extend(f"{scenario.id}: {r.message}" for r in verdict.reasons)
        scenarios.append(ScenarioResult(
            id=scenario.id, task=scenario.task, seed_files=scenario.seed_files,
            tags=scenario.tags, expected=scenario.expected, invariants=scenario.invariants,
            planned=planned,
            passed=verdict.passed, gate=verdict.to_json(),
        ))
    planned_runs = sum(run.planned.values())
    suite_verdict = evaluate(total, scenario_policy(policy, None, planned_runs))
    reasons.extend(f"suite: {r.message}" for r in suite_verdict.reasons)
    if run.stopped:
        reasons.insert(0, f"suite incomplete: {run.stopped}")
    passed = suite_verdict.passed and all(s.passed for s in scenarios) and not run.stopped
    return SuiteResult(
        suite=str(run.suite.root), config=run.config.name,
        config_hash=run.config.content_hash, agent=agent,
        started_at=run.started_at, finished_at=run.finished_at,
        planned_runs=planned_runs, completed_runs=len(run.records), stopped=run.stopped,
        eval_mode=run.options.eval_mode, replayed=run.options.replay_dir is not None,
        passed=passed, reasons=reasons, suite_gate=suite_verdict.to_json(),
        scenarios=scenarios, runs=run.records,
    )
