"""Suite runs read criterion by criterion: spec criteria, the reference, and regressions by key.

Pure apart from reading the suite's own files. During a run, `run_checks` adds to
each run's checks the verdict of every criterion generated from the config's
spec (the config file's `spec`, else the suite's `criteria.json`) and the
field-by-field score against the scenario's reference (`expected`). Afterwards
`verdicts` folds those with the online invariants' criteria into one
`{key: True | False | None}` map per run, which the report tallies per key and
the comparison pairs per (scenario, repeat) to name regressions by criterion.

A text reference is not scored here: the pairwise judge receives it as the
scenario's `expected` (a reference that is not a criterion verdict is
left to the judge).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gatekeeper.checks.criteria import Criterion, evaluate, generate
from gatekeeper.checks.reference import score
from gatekeeper.checks.review import Regression, Tally, rates_table, regressions, tally
from gatekeeper.checks.spec import Spec
from gatekeeper.suite.scenario import Scenario, SuiteError
from rolegate.trace import Trace

if TYPE_CHECKING:  # pragma: no cover - only for annotations; avoids an import cycle
    from gatekeeper.suite.records import RunRecord
    from gatekeeper.suite.verdict import SuiteResult

SPEC_CHECKS = "spec"
REFERENCE_CHECK = "reference"
CRITERIA_FILE = "criteria.json"
INPUT_FILE = "input.json"


def suite_criteria(root: Path, config_data: Mapping[str, Any]) -> list[Criterion]:
    """The criteria a suite run scores: from the config's `spec`, else the suite's criteria.json."""
    if "spec" in config_data:
        try:
            return generate(Spec.model_validate(config_data["spec"]))
        except ValidationError as exc:
            raise SuiteError(f"config spec: {exc}", field="spec") from None
    path = root / CRITERIA_FILE
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return [Criterion.model_validate(c) for c in data.get("criteria", [])]
    except (ValueError, ValidationError) as exc:
        raise SuiteError(f"{path}: {exc}", file=str(path)) from None


def scenario_input(root: Path, scenario: Scenario) -> dict[str, Any]:
    """The job input a scenario was rebuilt from: its seeded input.json plus the task."""
    data: dict[str, Any] = {}
    source = scenario.seed_files.get(INPUT_FILE)
    if source is not None and (root / source).is_file():
        try:
            loaded = json.loads((root / source).read_text(encoding="utf-8"))
        except ValueError:
            loaded = None
        if isinstance(loaded, dict):
            data.update(loaded)
    data.setdefault("task", scenario.task)
    return data


def run_checks(criteria: Sequence[Criterion], root: Path, scenario: Scenario,
               trace: Trace | None) -> dict[str, Any]:
    """Extra checks for one run: spec criteria verdicts and the reference score."""
    out: dict[str, Any] = {}
    if criteria:
        if trace is None:
            out[SPEC_CHECKS] = {c.key: (False if c.deterministic else None) for c in criteria}
        else:
            if trace.input is None:
                # Escalation rules read the job's input; suite traces carry the scenario's.
                trace = trace.model_copy(update={"input": scenario_input(root, scenario)})
            out[SPEC_CHECKS] = evaluate(criteria, trace)
    if scenario.expected is not None:
        result = score(trace.output_text if trace is not None else "", scenario.expected)
        out[REFERENCE_CHECK] = result.as_dict()
    return out


def verdicts(record: RunRecord) -> dict[str, bool | None]:
    """One run's verdict per criterion key: invariants, spec criteria and the reference."""
    checks = record.checks
    out: dict[str, bool | None] = {k: bool(v) for k, v in checks.get("criteria", {}).items()}
    out.update(checks.get(SPEC_CHECKS, {}))
    reference = checks.get(REFERENCE_CHECK)
    if reference is not None:
        out[REFERENCE_CHECK] = None if reference["score"] is None else reference["score"] == 1.0
    return out


def case_id(record: RunRecord) -> str:
    """How runs pair across two suite results: scenario and repeat."""
    return f"{record.scenario}#{record.repeat}"


def criterion_rates(result: SuiteResult) -> dict[str, Tally]:
    """Pass counts per criterion key over every run of a suite result."""
    return tally(verdicts(r) for r in result.runs)


def criterion_regressions(base: SuiteResult, cand: SuiteResult,
                          criteria: Sequence[Criterion] = ()) -> list[Regression]:
    """Criteria the candidate lost on (scenario, repeat) pairs the baseline passed."""
    return regressions({case_id(r): verdicts(r) for r in base.runs},
                       {case_id(r): verdicts(r) for r in cand.runs}, criteria)


def rates_markdown(results: Sequence[SuiteResult]) -> list[str]:
    """Markdown lines: pass rate per criterion key, one column per config."""
    table = rates_table({r.config: criterion_rates(r) for r in results})
    return ["## By criterion", "", *table, ""] if table else []


def regressions_markdown(found: Sequence[Regression]) -> list[str]:
    """Markdown lines listing regressions by criterion, worst first."""
    if not found:
        return ["## Regressions by criterion", "", "none", ""]
    return ["## Regressions by criterion", "",
            *[f"- `{r.key}`: {r.message}" for r in found], ""]


def criterion_comparison(base: SuiteResult, cand: SuiteResult,
                         criteria: Sequence[Criterion] = ()) -> dict[str, Any]:
    """Per-criterion pass rates of both configs and the candidate's regressions by key.

    `criteria` (defaults to the candidate suite's criteria.json) only words the
    messages; the verdicts come from the runs.
    """
    if not criteria:
        criteria = suite_criteria(Path(cand.suite), {}) if Path(cand.suite).is_dir() else []
    labels = (base.config, cand.config) if base.config != cand.config \
        else (f"{base.config} (baseline)", f"{cand.config} (candidate)")
    found = criterion_regressions(base, cand, criteria)
    return {
        "rates": {labels[0]: {k: t.as_dict() for k, t in criterion_rates(base).items()},
                  labels[1]: {k: t.as_dict() for k, t in criterion_rates(cand).items()}},
        "regressions": [r.as_dict() for r in found],
    }


def section_tallies(section: Mapping[str, Any]) -> dict[str, dict[str, Tally]]:
    """`criterion_comparison`'s rates read back as tallies, per config."""
    return {label: {k: Tally(v["passed"], v["failed"], v["skipped"]) for k, v in rates.items()}
            for label, rates in section.get("rates", {}).items()}


def rates_rows(by_config: Mapping[str, Mapping[str, Tally]]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the per-criterion table, for the HTML reports."""
    keys = sorted({key for tallies in by_config.values() for key in tallies})
    rows = [[key, *("–" if (t := by_config[c].get(key)) is None or t.rate is None
                    else f"{t.rate:.0%} ({t.passed}/{t.n})" for c in by_config)]
            for key in keys]
    return ["criterion", *by_config], rows


def comparison_markdown(section: Mapping[str, Any]) -> list[str]:
    """Markdown lines for `criterion_comparison`'s output: the table, then the regressions."""
    table = rates_table(section_tallies(section))
    lines = ["## By criterion", "", *table, ""] if table else []
    found = [Regression(key=r["key"], lost=r["lost"], gained=r["gained"],
                        cases=tuple(r["cases"]), message=r["message"])
             for r in section.get("regressions", [])]
    return lines + regressions_markdown(found)
