"""`rolegate suite run` and `rolegate suite compare`: the offline regression suite from CI.

Exit codes: 0 the suite (or the comparison) passed, 1 the gate failed, 2 an
error (a bad suite, config or flag, an unreachable router for --post).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import requests

from bindings.errors import RolegateError
from bindings.models import GatePolicy
from gatekeeper.suite.compare import SuiteComparison, compare_results, resource_deltas
from gatekeeper.suite.judge import DEFAULT_FLOOR, JudgeSettings, PairwiseJudge, judge_suites
from gatekeeper.suite.records import RunOptions
from gatekeeper.suite.report import (
    RESULTS_FILE,
    comparison_markdown,
    load_result,
    result_markdown,
    write_comparison,
    write_result,
)
from gatekeeper.suite.runner import SuiteRunner
from gatekeeper.suite.scenario import WEIGHT_REPEATS, load_config, load_suite
from gatekeeper.suite.verdict import RESULT_FORMAT, SuiteResult, evaluate_run
from rolegate.http import ApiClient, ApiError
from router.cli.common import token_option, url_option

EXIT_PASSED = 0
EXIT_GATE_FAILED = 1
EXIT_ERROR = 2


class UsageProblem(Exception):
    """A flag combination or file that makes the command impossible to run."""


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _load_policy(path: str | None) -> GatePolicy:
    if path is None:
        return GatePolicy()
    try:
        return GatePolicy.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageProblem(f"--policy {path}: {exc}") from None


def _options(repeats: int | None, weight: str | None, parallel: int, timeout: float,
             max_runs: int | None, max_cost: float | None, record: str | None,
             replay: str | None, role: str | None) -> RunOptions:
    if repeats is not None and weight is not None:
        raise UsageProblem("give --repeats or --weight, not both")
    if record is not None and replay is not None:
        raise UsageProblem("give --record or --replay, not both")
    return RunOptions(repeats=repeats, weight=weight, parallel=parallel, timeout_s=timeout,
                      max_runs=max_runs, max_cost_usd=max_cost,
                      record_dir=Path(record) if record else None,
                      replay_dir=Path(replay) if replay else None, role=role or "offline")


def run_config(suite_dir: str, config_path: str, agent: str, options: RunOptions,
               policy: GatePolicy, quiet: bool) -> SuiteResult:
    """Run one config through the suite and judge it."""
    suite = load_suite(suite_dir)
    config = load_config(config_path)
    runner = SuiteRunner(suite, config, agent, options, progress=None if quiet else sys.stderr)
    return evaluate_run(runner.run(), policy, agent)


def post_verdict(url: str, token: str | None, role: str, result: SuiteResult,
                 comparison: SuiteComparison | None = None) -> dict[str, Any]:
    """Send the verdict for (role, candidate config) to the router."""
    passed = result.passed and (comparison is None or comparison.passed)
    reasons = list(result.reasons) + ([f"compare: {b}" for b in comparison.blocking]
                                      if comparison else [])
    body = {
        "config": result.config, "passed": passed, "reasons": reasons, "suite": result.suite,
        "config_hash": result.config_hash, "planned_runs": result.planned_runs,
        "completed_runs": result.completed_runs, "stopped": result.stopped,
        "scenarios": {s.id: {"verdict": s.gate["verdict"], "pass_rate": s.gate["pass_rate"],
                             "n": s.gate["n"]} for s in result.scenarios},
        "comparison": None if comparison is None else {
            "baseline": comparison.baseline, "passed": comparison.passed,
            "blocking": comparison.blocking, "mcnemar": comparison.paired["mcnemar"],
        },
    }
    api = ApiClient(url, token)
    try:
        answer: dict[str, Any] = api.request(
            "POST", f"/v1/roles/{quote(role, safe='')}/offline", json=body, ok=(201,)).json()
        return answer
    finally:
        api.close()


def _post_or_fail(post: bool, role: str | None, url: str, token: str | None,
                  result: SuiteResult, comparison: SuiteComparison | None = None) -> None:
    if not post:
        return
    assert role is not None
    try:
        post_verdict(url, token, role, result, comparison)
    except ApiError as exc:
        _fail(f"posting the verdict: {exc.status} {exc.code}: {exc.message}")
    except (requests.ConnectionError, requests.Timeout) as exc:
        _fail(f"cannot reach rolegate at {url}: {exc}")
    click.echo(f"posted verdict for role {role}, config {result.config}", err=True)


def _common(func: Any) -> Any:
    """The flags `run` and `compare` share."""
    options = [
        click.option("--repeats", type=click.IntRange(1, 1000), default=None,
                     help="Runs per scenario (overrides the scenario files)."),
        click.option("--weight", type=click.Choice(sorted(WEIGHT_REPEATS)), default=None,
                     help="Repeats by the weight of the change: minor 3, safety 5."),
        click.option("--parallel", type=click.IntRange(1, 64), default=4, show_default=True,
                     help="Runs at the same time."),
        click.option("--timeout", type=click.FloatRange(0.1, None), default=120.0,
                     show_default=True, help="Seconds one run may take before it is killed."),
        click.option("--max-runs", type=click.IntRange(0, None), default=None,
                     help="Budget: start at most this many runs."),
        click.option("--max-cost", type=click.FloatRange(0.0, None), default=None,
                     help="Budget: start no run once this many USD are spent."),
        click.option("--replay", type=click.Path(file_okay=False), default=None,
                     help="Serve tool calls from the fixtures in this directory."),
        click.option("--policy", type=click.Path(dir_okay=False, exists=True), default=None,
                     help="Gate policy JSON (thresholds); default: GatePolicy defaults."),
        click.option("--out", type=click.Path(file_okay=False), default=None,
                     help="Where to write the JSON, Markdown and HTML reports."),
        click.option("--post", is_flag=True, help="Send the verdict to the router (--role)."),
        click.option("--role", default=None, help="The role the verdict is for."),
        url_option("rolegate API for --post [env ROLEGATE_URL]."),
        token_option("Bearer token for --post [env ROLEGATE_TOKEN]."),
        click.option("--quiet", is_flag=True, help="No progress bar."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group()
def suite() -> None:
    """Offline regression suite: scenarios x repeats before a candidate sees traffic."""


@suite.command("run")
@click.argument("suite_dir", metavar="SUITE", type=click.Path(exists=True, file_okay=False))
@click.option("--config", "config_path", required=True,
              type=click.Path(exists=True, dir_okay=False), help="The config under test (JSON).")
@click.option("--agent", required=True, help="The agent command (adapter protocol).")
@click.option("--record", type=click.Path(file_okay=False), default=None,
              help="Save each run's tool calls as fixtures in this directory.")
@click.option("--baseline", type=click.Path(exists=True), default=None,
              help="A stored result to warn against (latency +20%, tokens +15%).")
@_common
def run_command(suite_dir: str, config_path: str, agent: str, record: str | None,
                baseline: str | None,
                repeats: int | None, weight: str | None, parallel: int, timeout: float,
                max_runs: int | None, max_cost: float | None, replay: str | None,
                policy: str | None, out: str | None, post: bool, role: str | None, url: str,
                token: str | None, quiet: bool) -> None:
    """Run SUITE against one config; exit 0 passed, 1 gate failed, 2 error."""
    if post and not role:
        _fail("--post needs --role")
    try:
        options = _options(repeats, weight, parallel, timeout, max_runs, max_cost, record,
                           replay, role)
        before = load_result(baseline) if baseline else None
        result = run_config(suite_dir, config_path, agent, options, _load_policy(policy), quiet)
    except (UsageProblem, RolegateError, ValueError, OSError) as exc:
        _fail(str(exc))
    if before is not None:
        _resources, warnings = resource_deltas(before, result)
        result = result.model_copy(update={"warnings": [*result.warnings, *warnings]})
    out_dir = Path(out) if out else Path("suite-results") / result.config
    try:
        write_result(result, out_dir)
    except OSError as exc:
        _fail(f"writing the reports to {out_dir}: {exc}")
    click.echo(result_markdown(result))
    click.echo(f"reports: {out_dir / RESULTS_FILE} (+ summary.md, report.html)")
    _post_or_fail(post, role, url, token, result)
    sys.exit(EXIT_PASSED if result.passed else EXIT_GATE_FAILED)


def _is_result(path: Path) -> bool:
    if path.is_dir():
        return (path / RESULTS_FILE).is_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == RESULT_FORMAT


def _side(path: str, suite_dir: str | None, agent: str | None, options: RunOptions,
          policy: GatePolicy, quiet: bool) -> SuiteResult:
    location = Path(path)
    if _is_result(location):
        return load_result(location)
    if suite_dir is None or agent is None:
        raise UsageProblem(f"{path} is a config, so --suite and --agent are needed to run it")
    return run_config(suite_dir, path, agent, options, policy, quiet)


@suite.command("compare")
@click.argument("baseline")
@click.argument("candidate")
@click.option("--suite", "suite_dir", type=click.Path(exists=True, file_okay=False),
              default=None, help="The suite to run configs through.")
@click.option("--agent", default=None, help="The agent command, when comparing configs.")
@click.option("--judge-url", envvar="ROLEGATE_JUDGE_URL", default=None,
              help="OpenAI-compatible chat-completions URL for the pairwise judge.")
@click.option("--judge-model", default="judge", show_default=True)
@click.option("--judge-floor", type=float, default=DEFAULT_FLOOR, show_default=True,
              help="Block when the mean score_delta is under this.")
@click.option("--judge-seed", type=int, default=None, help="Seed for the A/B order.")
@_common
def compare_command(baseline: str, candidate: str, suite_dir: str | None, agent: str | None,
                    judge_url: str | None, judge_model: str, judge_floor: float,
                    judge_seed: int | None, repeats: int | None, weight: str | None,
                    parallel: int, timeout: float, max_runs: int | None,
                    max_cost: float | None, replay: str | None, policy: str | None,
                    out: str | None, post: bool, role: str | None, url: str,
                    token: str | None, quiet: bool) -> None:
    """Compare BASELINE and CANDIDATE (configs to run, or stored results); 0 ok, 1 blocked."""
    if post and not role:
        _fail("--post needs --role")
    try:
        options = _options(repeats, weight, parallel, timeout, max_runs, max_cost, None,
                           replay, role)
        gate_policy = _load_policy(policy)
        base = _side(baseline, suite_dir, agent, options, gate_policy, quiet)
        cand = _side(candidate, suite_dir, agent, options, gate_policy, quiet)
    except (UsageProblem, RolegateError, ValueError, OSError) as exc:
        _fail(str(exc))
    comparison = compare_results(base, cand, alpha=gate_policy.thresholds.alpha)
    if judge_url:
        if comparison.blocking:
            click.echo("judge skipped: the deterministic checks already block", err=True)
        else:
            judge = PairwiseJudge(JudgeSettings(
                url=judge_url, model=judge_model, floor=judge_floor, seed=judge_seed,
                api_key=os.environ.get("ROLEGATE_JUDGE_API_KEY")))
            try:
                verdicts = judge_suites(judge, base, cand)
            finally:
                judge.close()
            comparison = compare_results(base, cand, alpha=gate_policy.thresholds.alpha,
                                         judge=verdicts)
    out_dir = Path(out) if out else Path("suite-results") / f"{cand.config}-vs-{base.config}"
    try:
        write_comparison(comparison, out_dir)
    except OSError as exc:
        _fail(f"writing the reports to {out_dir}: {exc}")
    click.echo(comparison_markdown(comparison))
    click.echo(f"reports: {out_dir / 'comparison.json'} (+ comparison.md, comparison.html)")
    _post_or_fail(post, role, url, token, cand, comparison)
    sys.exit(EXIT_PASSED if comparison.passed else EXIT_GATE_FAILED)


def register(main: click.Group) -> None:
    """Add `rolegate suite` to the command group."""
    main.add_command(suite)
