"""The gatekeeper's sections of the gate view: "paired" (shadow) and "drift" (CUSUM).

Both are replayed from the ordered trace streams on every read, so they need no
state of their own: a tick continues exactly where the last left off, and any
number of gatekeepers see the same numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bindings.models import Stage
from bindings.store import _redis_errors
from bindings.traces import StoredTrace, TraceStore, stream_key
from gatekeeper.drift import drift_view
from gatekeeper.pairing import Run, compare, pair_runs

if TYPE_CHECKING:
    from router.api_gate import GateContext

#: Most traces replayed per arm per read: bounds the cost of one gate view.
MAX_REPLAY = 20_000
#: Newest current-arm runs the drift baselines and the current's own detector use.
REFERENCE_RUNS = 2_000


def run_of(stored: StoredTrace) -> Run:
    """The pairing/drift view of one stored trace."""
    trace, verdict = stored.trace, stored.verdict
    return Run(key=trace.key, passed=verdict.passed, tools=tuple(trace.tools),
               tool_error=trace.tool_errors > 0, forbidden_call=bool(verdict.forbidden))


def run_of_fields(fields: Mapping[bytes, bytes]) -> Run:
    """The same view read straight off a stream entry (t: trace JSON, v: verdict JSON).

    Plain JSON, not the pydantic models: the trace was validated on ingest, and a
    gate view replays thousands of these on every read.
    """
    trace = json.loads(fields[b"t"])
    verdict = json.loads(fields[b"v"])
    return Run(key=str(trace.get("key", "")), passed=bool(verdict["passed"]),
               tools=tuple(trace.get("tools", ())),
               tool_error=int(trace.get("tool_errors", 0)) > 0,
               forbidden_call=bool(verdict.get("forbidden")))


def latest(traces: TraceStore, role: str, config: str, arm: str, count: int) -> list[Run]:
    """The newest `count` runs of (role, config, arm), oldest first."""
    with _redis_errors():
        entries = traces.connection.xrevrange(stream_key(role, config, arm), count=count)
    return [run_of_fields(fields) for _, fields in reversed(entries)]


def since(traces: TraceStore, role: str, config: str, arm: str, start: float | None,
          count: int = MAX_REPLAY) -> list[Run]:
    """Runs of (role, config, arm) that arrived at or after `start`, oldest first."""
    low = "-" if start is None else f"{max(0, int(start * 1000))}-0"
    with _redis_errors():
        entries = traces.connection.xrange(stream_key(role, config, arm), min=low, max="+",
                                           count=count)
    return [run_of_fields(fields) for _, fields in entries]


def _since_stage(ctx: GateContext, config: str, arm: str) -> list[Run]:
    return since(ctx.traces, ctx.role, config, arm, ctx.record.binding.stage_since)


def candidate_arm(stage: Stage) -> str:
    """Which trace arm carries the candidate's runs in `stage`."""
    return "shadow" if stage is Stage.SHADOW else "candidate"


def paired_section(ctx: GateContext) -> dict[str, Any] | None:
    """In shadow: current and shadow runs of the same jobs, paired and compared."""
    binding = ctx.record.binding
    if binding.stage is not Stage.SHADOW or binding.candidate is None:
        return None
    current = _since_stage(ctx, binding.current, "current")
    shadow = _since_stage(ctx, binding.candidate, "shadow")
    thresholds = binding.gate.thresholds
    report = compare(pair_runs(current, shadow), alpha=thresholds.alpha,
                     min_samples=thresholds.min_samples,
                     required_tools=binding.gate.invariants.required_tools)
    return report.as_dict()


def drift_section(ctx: GateContext) -> dict[str, Any]:
    """CUSUM per metric: the candidate's stage runs against current's rates, and current alone."""
    binding = ctx.record.binding
    reference = latest(ctx.traces, ctx.role, binding.current, "current", REFERENCE_RUNS)
    candidate: Sequence[Run] | None = None
    if binding.candidate is not None and binding.stage in (Stage.SHADOW, Stage.CANARY,
                                                            Stage.FULL):
        candidate = _since_stage(ctx, binding.candidate, candidate_arm(binding.stage))
    view = drift_view(candidate, reference, binding.gate.drift)
    view["alert"] = any(a["arm"] == "current" for a in view["alarms"])
    return view
