"""The gate view's per-arm sections: each arm's verdict, and each arm against current."""

from __future__ import annotations

from typing import Any

from bindings.models import GatePolicy, Stage
from gatekeeper.gate import Reason, compare, evaluate
from gatekeeper.stats.winsor import TOKENS_WARN, winsorized_comparison
from gatekeeper.view.context import GateContext
from gatekeeper.view.latency import latency_reasons, with_latency
from gatekeeper.view.steps import step_reasons
from gatekeeper.window import WindowStats


def arms_section(ctx: GateContext) -> dict[str, Any]:
    """Per arm: its config, the gate's verdict, reasons and figures, and evidence by reporter.

    `by_reporter` names each token that reported traces for the arm in this stage
    with its own n, pass rate and forbidden-call rate, and whether it counts
    (every reporter does unless the policy names `trusted_reporters`).
    `clashes` counts the arm's traces (any reporter's, counted or not) stored
    under a run id another reporter had sent first, and each reporter's own
    `clashes` the ones it sent: someone reporting under another's run ids.
    """
    policy = ctx.record.binding.gate
    trusted = policy.trusted_reporters
    _, current = ctx.arms["current"]
    stage = ctx.record.binding.stage
    ruled = bool(ctx.record.binding.rules)
    return {arm: {"config": config, **with_latency(
                      evaluate(window, policy, point_steps=False,
                               floor=bucketed(window) if ruled else None).to_json(),
                      _quantile_reasons(arm, window, current, policy, stage)),
                  "clashes": sum(own.clashes for own in ctx.by_reporter.get(arm, {}).values()),
                  "by_reporter": {
                      name: {**_evidence(own), "counted": trusted is None or name in trusted}
                      for name, own in ctx.by_reporter.get(arm, {}).items()}}
            for arm, (config, window) in ctx.arms.items()}


def bucketed(window: WindowStats) -> tuple[int, int] | None:
    """(runs, passes) of the arm's bucketed runs: those no targeting rule picked.

    A rule may send a whole population (a hard tenant) to one arm; the pass-rate
    floor then reads the runs both arms share in kind, as the comparison with
    current does (its cells are per rule stratum). None when no cell says.
    """
    cells = window.cells("run_failure")
    runs = sum(n for (_, stratum), (n, _) in cells.items() if stratum == "")
    failed = sum(f for (_, stratum), (_, f) in cells.items() if stratum == "")
    return (runs, runs - failed) if cells else None


def _quantile_reasons(arm: str, window: WindowStats, current: WindowStats, policy: GatePolicy,
                      stage: Stage) -> list[Reason]:
    """p95 steps (every arm against the ceiling, the others against current too) and latency."""
    t = policy.thresholds
    if arm == "current":
        return step_reasons(window, None, t, stage)
    return [*step_reasons(window, current, t, stage),
            *latency_reasons(window, current, t, stage)]


def _evidence(window: WindowStats) -> dict[str, Any]:
    """One reporter's share of an arm's window, in the gate's own figures."""
    figures = evaluate(window, GatePolicy()).to_json()
    return {**{key: figures.get(key) for key in ("n", "pass_rate", "forbidden_rate")},
            "clashes": window.clashes}


def comparison_section(ctx: GateContext) -> dict[str, Any]:
    """Candidate and shadow pass rates against current's over the same period."""
    _, current = ctx.arms["current"]
    return {arm: {**compare(window, current).to_json(),
                  # Means capped at the pooled 99th percentile, the raw means beside.
                  "cost_usd": winsorized_comparison(window.cost_histogram(),
                                                    current.cost_histogram()),
                  "tokens": winsorized_comparison(window.tokens_histogram(),
                                                  current.tokens_histogram(), TOKENS_WARN)}
            for arm, (_, window) in ctx.arms.items() if arm != "current"}
