"""The whole gate view of a simulated canary stage, as the router builds it, and decide() on it.

`bench.units_world` sends every run here as the router's ingest stores it: the
`Trace`'s window increments (`window.increments`, with the report's arrival as
ingest's clock: cells filed by start, the lag histogram, `rep:`), the unit
facts (`unit_events.unit_facts`, folded as `UNITS_LUA` folds them, by
`bench.units_world.Arm`) and each resolve counted as an exposure in its 30 s
bucket of the resolve (`rolegate.exposures.BUCKET_S`), one reporter for both
arms. `view` then builds what `gatekeeper.view.build.gate_view` builds and
decide() reads, with the view's own functions on a `GateContext` over those
windows: `arms_section`, `reports_section` with `merge_missing`,
`concurrent_section` with `missing_for`, the drift section's baseline
(`drift.params_for` over current's stage runs, as `view.sections` gives it
when it holds no history), the `rollout` section (`rollout.walk` and
`carried_of` over the binding's one history entry: the rollout began in this
canary) and the `units` section (`unit_test`, as `view.units` calls it).
`decide.evidence_from_view` reads it and `decide.decide` judges it.

What it leaves out, and why it cannot matter here: paired (shadow only),
judges and criteria (the sim's configs have none), per-reporter figures (one
reporter), the `difference`, `previous` and `next` sections (decide() reads
none of them). The drift detectors' CUSUM figures (with the concurrent section
nothing rolls back on them) are not advanced: their p0 is.
"""

from __future__ import annotations

from typing import Any, cast

from bench.sim_core import Ledger
from bindings.models import Binding, VersionedBinding
from gatekeeper.checks.invariants import TraceVerdict
from gatekeeper.machine.decide import Decision, decide, evidence_from_view
from gatekeeper.stats.drift import (
    RUN_FAILURE,
    SETTLED_REFERENCE,
    Detector,
    Params,
    params_for,
    section,
)
from gatekeeper.stats.units import Stretch, UnitVerdict
from gatekeeper.store.trace_keys import epoch_of
from gatekeeper.store.traces import TraceStore
from gatekeeper.view.arms import arms_section
from gatekeeper.view.concurrent import closing, concurrent_section
from gatekeeper.view.context import GateContext
from gatekeeper.view.reports import ReportCounts, merge_missing, missing_for, reports_section
from gatekeeper.view_model import DriftView, GateView, RolloutView, drift_view
from gatekeeper.view_model.arms import arms_view
from gatekeeper.view_model.concurrent import concurrent_view
from gatekeeper.view_model.reports import reports_view
from gatekeeper.view_model.units import StretchView, UnitLimitsView, UnitsView, UnitTestView
from gatekeeper.window import WindowStats, increments
from rolegate import exposures
from rolegate.trace import Trace

#: The one reporter every run and resolve is counted under.
REPORTER = "agents"
CONFIGS = {"candidate": "cfg-b", "current": "cfg-a"}


class GateState:
    """What the router's stores hold for one simulated canary stage, and its gate view."""

    def __init__(self, binding: Binding) -> None:
        self.record = VersionedBinding(role="sim", version=1, binding=binding, updated_at=0.0,
                                       updated_by="sim")
        self.epoch = epoch_of(binding)
        self.windows = {arm: WindowStats() for arm in CONFIGS}
        #: Per arm: (assigned per report bucket of the resolve, reported per bucket of the start).
        self.assigned: dict[str, dict[int, int]] = {arm: {} for arm in CONFIGS}
        carried = Ledger(self.record, True).rollout(self.record)
        self.rollout = None if carried is None else RolloutView.model_validate(
            carried.as_dict(binding))
        self.reads = 0
        #: The run-failure detector's params as the drift store keeps them (`drift`).
        self.params: Params | None = None
        drift = binding.gate.drift
        self.drift_policy = drift if drift.h is not None else drift.model_copy(update={"h": 5.0})

    def resolved(self, arm: str, when: float) -> None:
        """A job resolved to `arm` at `when`: the exposure the router counts."""
        bucket = int(when // exposures.BUCKET_S)
        counts = self.assigned[arm]
        counts[bucket] = counts.get(bucket, 0) + 1

    def reported(self, trace: Trace, verdict: TraceVerdict, arrival: float) -> None:
        """A run's report stored at `arrival` (ingest's clock)."""
        fields = self.windows[trace.arm].fields
        fields.update(increments(trace, verdict, arrival))

    def closed_before(self, now: float) -> int:
        """The concurrent section's first unread bucket at `now`."""
        return closing(self.windows["candidate"], self.windows["current"], now).before

    def context(self, now: float) -> GateContext:
        """The `GateContext` the router's view would build over these windows at `now`."""
        return GateContext("sim", self.record, self.epoch,
                           {arm: (CONFIGS[arm], self.windows[arm])
                            for arm in ("current", "candidate")},
                           cast(TraceStore, None), now, {})

    def view(self, now: float, units: UnitsView | None) -> GateView:
        """The gate view's sections decide() reads, built by the view's own functions
        (`GateView.model_construct`, as `gate_view` builds it; the header and the sections
        decide() does not read are left out)."""
        self.reads += 1
        ctx = self.context(now)
        binding = self.record.binding
        view: dict[str, Any] = {"stage": binding.stage, "arms": arms_section(ctx),
                                "paired": None}
        reported = {arm: self.windows[arm].reported_buckets() for arm in CONFIGS}
        # One reporter, no run ids: its reports set against its assignments per bucket.
        counts = ReportCounts({REPORTER: (
            (self.assigned["candidate"], reported["candidate"]),
            (self.assigned["current"], reported["current"]))})
        view["reports"] = reports_section(ctx, counts)
        merge_missing(view["arms"], view["reports"])
        view["arms"] = arms_view(view["arms"])
        view["reports"] = reports_view(view["reports"])
        view["drift"] = self.drift()
        view["concurrent"] = concurrent_view(concurrent_section(ctx, missing_for(ctx, counts)))
        view["rollout"] = self.rollout
        view["units"] = units
        return GateView.model_construct(**view)

    def drift(self) -> DriftView:
        """The drift section's run-failure detector: p0 from current's stage runs, kept as
        the drift store keeps a detector (`Detector.outdated`: with an h derived for p0, a
        new p0 is taken once the reference it came from has doubled, until it is settled)."""
        policy = self.record.binding.gate
        current = self.windows["current"]
        kept = self.params
        if kept is None or (kept.reference < SETTLED_REFERENCE
                            and current.n >= 2 * kept.reference):
            reference = WindowStats({"n": current.n, "passes": current.passes,
                                     "error_runs": current.error_runs,
                                     "forbidden": current.forbidden})
            # decide() reads the detector's p0, its reference and the rate observed, never
            # its h (with the concurrent section the CUSUMs there roll back): the h derived
            # for p0 (a Markov chain's ARL, ~0.2 s) is left at a fixed value.
            wanted = params_for(RUN_FAILURE, self.drift_policy, reference,
                                policy.thresholds.min_samples, policy.thresholds.alpha)
            if wanted is not None:
                self.params = wanted
        shown = {} if self.params is None else {
            RUN_FAILURE: Detector(RUN_FAILURE, self.params).as_dict(True)}
        return drift_view(section(shown, {}, policy.drift))

    def decide(self, now: float, units: UnitsView | None) -> Decision:
        """decide() on the view at `now`."""
        return decide("sim", self.record, evidence_from_view(self.view(now, units)), now)


def units_section(verdict: UnitVerdict, stretches: list[Stretch]) -> UnitsView:
    """`view.units.units_section`'s section of this verdict (decide() reads its `test` and
    `reason`; the arms' and limits' figures, which it does not read, left empty)."""
    return UnitsView.model_construct(
        rollout=CONFIGS["candidate"],
        stretches=[StretchView.model_construct(since=s.since, share=s.share)
                   for s in stretches],
        arms={}, limits=UnitLimitsView.model_construct(slow_ms=None, costly_micros=None,
                                                       from_s=None),
        test=UnitTestView.model_validate(verdict.as_dict()),
        reason=verdict.reason() if verdict.reject else None)


def rule_of(reason: str) -> str:
    """Which of decide()'s rules a rollback reason names (for the table's breakdown)."""
    for prefix, rule in (("unit test", "units"), ("CUSUM", "cusum"),
                         ("sequential", "sequential"), ("gate failed at the stage", "stage_end"),
                         ("gate failed", "gate"), ("report", "reports")):
        if reason.startswith(prefix) or prefix in reason[:40]:
            return rule
    return reason.split(":")[0].replace(" ", "_")[:24] or "other"
