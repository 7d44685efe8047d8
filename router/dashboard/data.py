"""What the dashboard shows, as plain data: read from the stores, shaped for templates.

The gate numbers are the gate view's own (`gatekeeper.view.gate_view`), so the
dashboard can never disagree with GET /v1/roles/<role>/gate. The two series the
gate view does not carry, pass rate over time and the CUSUM path, are computed
here from the same trace streams with the same detectors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bindings.errors import RolegateError
from bindings.models import HistoryEntry, Stage, VersionedBinding
from bindings.store import BindingStore
from gatekeeper.stats.drift import METRICS, baseline, derived_h
from gatekeeper.stats.pairing import Run
from gatekeeper.stats.statistics import Cusum
from gatekeeper.store.traces import StoredTrace, TraceStore
from gatekeeper.view import arm_configs, gate_view
from gatekeeper.view.sections import REFERENCE_RUNS, candidate_arm, latest, run_of
from gatekeeper.view_model import DriftView

#: Time buckets in the pass-rate chart.
PASS_RATE_BUCKETS = 24
#: Most traces read per arm for the charts: bounds the cost of one page.
MAX_CHART_TRACES = 20_000
#: Most points drawn per CUSUM line; longer paths keep each chunk's peak.
MAX_CUSUM_POINTS = 300
#: Without a stage start, the charts look this far back.
DEFAULT_LOOKBACK_S = 24 * 3600.0
HISTORY_SHOWN = 50

Point = tuple[float, float]


@dataclass(frozen=True)
class RoleRow:
    """One line of the overview table."""

    record: VersionedBinding
    #: The verdict of the arm under judgement (shadow, candidate, or current when stable).
    verdict: str | None
    judged_arm: str
    last: HistoryEntry | None
    #: Why the role's gate could not be read (the row says so instead of looking normal).
    error: str | None = None

    @property
    def role(self) -> str:
        """The role's name."""
        return self.record.role


def judged_arm(stage: Stage) -> str:
    """Which arm's verdict the overview shows for a role in `stage`."""
    if stage is Stage.SHADOW:
        return "shadow"
    if stage in (Stage.CANARY, Stage.FULL):
        return "candidate"
    return "current"


def overview(store: BindingStore, traces: TraceStore, now: float,
             visible: Callable[[str], bool] = lambda role: True) -> list[RoleRow]:
    """Every `visible` role with its binding, the judged arm's verdict (or why it is
    unreadable), its last change."""
    rows = []
    _, records = store.snapshot()
    for role, record in sorted(records.items()):
        if not visible(role):
            continue
        arm = judged_arm(record.binding.stage)
        history = store.history(role, limit=1)
        last = history[0] if history else None
        try:
            # The whole gate view, as the role page and the API read it: a gate the
            # role page cannot show never looks normal here.
            view = gate_view(store, traces, role, now)
        except RolegateError as exc:
            rows.append(RoleRow(record, None, arm, last, error=exc.message))
            continue
        judged = view.arms.get(arm)
        rows.append(RoleRow(record, None if judged is None else judged.verdict, arm, last))
    return rows


def run_time(stored: StoredTrace) -> float:
    """When the run ended (as its caller reported), else when it arrived."""
    return stored.trace.time if stored.trace.time is not None else stored.time


def pass_rate_series(traces: Sequence[StoredTrace], buckets: int = PASS_RATE_BUCKETS,
                     span: tuple[float, float] | None = None) -> list[Point]:
    """Pass rate per time bucket over `span` (default: the traces' own), empty buckets left out."""
    if not traces:
        return []
    times = [run_time(stored) for stored in traces]
    start, end = span if span is not None else (min(times), max(times))
    width = (end - start) / buckets if end > start else 1.0
    passes = [0] * buckets
    totals = [0] * buckets
    for stored, when in zip(traces, times):
        index = min(buckets - 1, max(0, int((when - start) / width)))
        totals[index] += 1
        passes[index] += int(stored.verdict.passed)
    return [(start + (i + 0.5) * width, passes[i] / totals[i])
            for i in range(buckets) if totals[i]]


def cusum_path(metric: str, runs: Sequence[Run], *, p0: float, shift: float, h: float,
               max_points: int = MAX_CUSUM_POINTS) -> list[Point]:
    """The CUSUM statistic after each run (x is the run's number), as the gate replays it.

    An alarm resets the sum, so a path that touches h and drops to 0 alarmed there.
    Long paths are thinned to `max_points`, keeping each chunk's highest value.
    """
    detector = Cusum(p0=p0, p1=min(1.0, p0 + shift), h=h)
    signal = METRICS[metric]
    path: list[Point] = []
    for n, run in enumerate(runs, start=1):
        alarmed = detector.update(signal(run))
        # Draw an alarm at h, where it fired, rather than at the reset value.
        path.append((float(n), h if alarmed else detector.s))
    if len(path) <= max_points:
        return path
    chunk = -(-len(path) // max_points)
    return [max(path[i:i + chunk], key=lambda p: p[1]) for i in range(0, len(path), chunk)]


def _chart_since(record: VersionedBinding, now: float) -> float:
    since = record.binding.stage_since
    return since if since is not None else now - DEFAULT_LOOKBACK_S


def pass_rates(traces: TraceStore, record: VersionedBinding, now: float) -> dict[str, list[Point]]:
    """Pass rate over time of each arm with traces since the stage began."""
    since = _chart_since(record, now)
    read = {arm: traces.read(record.role, config, arm, since=since, count=MAX_CHART_TRACES)
            for arm, config in arm_configs(record).items()}
    times = [run_time(t) for found in read.values() for t in found]
    if not times:
        return {}
    span = (min(times), max(max(times), min(times) + 1.0))
    return {arm: pass_rate_series(found, span=span) for arm, found in read.items() if found}


def cusum_paths(traces: TraceStore, record: VersionedBinding, now: float,
                drift: DriftView | None = None) -> tuple[str, dict[str, list[Point]]]:
    """The watched arm and its CUSUM path per metric, p0 taken as the gate takes it.

    A candidate in shadow, canary or full is watched against the current's rates.
    With the gate view's `drift` section, each path runs over the arm's stage runs
    with the p0 of the gate's own detector (none where the gate has none yet), as
    the gate counts them; without it, p0 comes from the newest current runs, and a
    role without a candidate shows the current's newer half against its older half.
    """
    binding = record.binding
    policy = binding.gate.drift
    if binding.candidate is not None and binding.stage in (Stage.SHADOW, Stage.CANARY,
                                                            Stage.FULL):
        name, arm, config = "candidate", candidate_arm(binding.stage), binding.candidate
    else:
        name, arm, config = "current", "current", binding.current
    paths: dict[str, list[Point]] = {}
    if not policy.enabled:
        return arm, paths
    if drift is not None:
        detectors = drift.candidate if name == "candidate" else drift.current
        watched = [run_of(s) for s in traces.read(record.role, config, arm,
                                                  since=binding.stage_since,
                                                  count=MAX_CHART_TRACES)] if detectors else []
        p0s = {m: float(d.p0) for m, d in detectors.items() if m in METRICS}
        hs = {m: float(d.h) for m, d in detectors.items() if m in METRICS}
    else:
        reference = latest(traces, record.role, binding.current, "current", REFERENCE_RUNS)
        if name == "candidate":
            watched = [run_of(s) for s in traces.read(record.role, config, arm,
                                                      since=binding.stage_since,
                                                      count=MAX_CHART_TRACES)]
        else:
            half = len(reference) // 2
            watched, reference = reference[half:], reference[:half]
        p0s = {m: p0 for m in METRICS if (p0 := baseline(m, policy, reference)) is not None}
        hs = {m: derived_h(policy, p0, binding.gate.thresholds.alpha) for m, p0 in p0s.items()}
    if not watched:
        return arm, paths
    for metric, p0 in p0s.items():
        paths[metric] = cusum_path(metric, watched, p0=p0, shift=policy.shift, h=hs[metric])
    return arm, paths


def role_detail(store: BindingStore, traces: TraceStore, role: str, now: float) -> dict[str, Any]:
    """Everything the role page shows; NotFound for an unknown role."""
    gate = gate_view(store, traces, role, now)
    record = store.get(role)
    if record.version != gate.version:
        # The binding moved between the two reads; show one consistent version.
        gate = gate_view(store, traces, role, now)
        record = store.get(role)
    watched, cusum = cusum_paths(traces, record, now, gate.drift)
    paired = gate.paired
    # The page shows the view's JSON, as the API serves it, pruned below.
    view = gate.as_json()
    judged = judged_arm(record.binding.stage)
    # An arm with no runs that the stage does not judge (the candidate arm while in
    # shadow, the shadow arm on a canary) is noise in the table.
    view["arms"] = {arm: figures for arm, figures in view["arms"].items()
                    if arm in ("current", judged) or figures.get("n")}
    view["comparison"] = {arm: c for arm, c in view.get("comparison", {}).items()
                          if arm in view["arms"]}
    previous = view.get("previous")
    if previous:
        # The same pruning for the stage a rollback ended: its judged arm, current, and
        # any arm that ran.
        ended = judged_arm(Stage(previous["stage"]))
        previous["arms"] = {arm: figures for arm, figures in previous["arms"].items()
                            if arm in ("current", ended) or figures.get("n")}
    return {
        "record": record,
        "binding": record.binding,
        "history": store.history(role, limit=HISTORY_SHOWN),
        "gate": view,
        "judged_arm": judged,
        "pass_rates": pass_rates(traces, record, now),
        "cusum_arm": watched,
        "cusum": cusum,
        "trajectory": None if paired is None else dict(paired.trajectory),
    }
