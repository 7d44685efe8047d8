"""The gatekeeper's sections of the gate view: "paired" (shadow) and "drift" (CUSUM).

Both keep their state in Redis and advance it over the runs that arrived since
the last read, so their cost follows what arrived, not the stage's size, and
any number of gatekeepers still see the same numbers: "paired" a running
pairing tally (`gatekeeper.store.paired_state`), "drift" CUSUM detectors
(`gatekeeper.store.drift_state`) with p0 from the current arm's running aggregate or
the policy's fixed baseline.
"""

from __future__ import annotations

from typing import Any, cast

from bindings.models import Stage
from bindings.store import _redis_errors
from gatekeeper.machine.decide import shadow_pairs_needed
from gatekeeper.stats.budget import final_alpha
from gatekeeper.stats.drift import METRICS, disabled_view, params_for, section
from gatekeeper.stats.pairing import Run
from gatekeeper.store.drift_state import DriftStates, Watch, run_of_fields
from gatekeeper.store.history import HistoryStore
from gatekeeper.store.paired_state import Arms, PairedStates
from gatekeeper.store.trace_keys import stream_key
from gatekeeper.store.traces import StoredTrace, StreamEntries, TraceStore
from gatekeeper.view.context import GateContext
from gatekeeper.view_model.drift import DriftView, drift_view
from gatekeeper.window import WindowStats

#: Most traces `since` reads per arm by default: bounds one replaying read.
MAX_REPLAY = 20_000
#: Newest current-arm runs the dashboard's CUSUM chart takes p0 from.
REFERENCE_RUNS = 2_000


def run_of(stored: StoredTrace) -> Run:
    """The pairing/drift view of one stored trace."""
    trace, verdict = stored.trace, stored.verdict
    return Run(key=trace.key, passed=verdict.passed, tools=trace.trajectory(),
               tool_error=trace.tool_errors > 0, forbidden_call=bool(verdict.forbidden))


#: Stream entries one read of `latest` takes: a 100,000-run read in one command
#: held the Redis server (and the reply the worker parses at once) for too long.
LATEST_PAGE = 5_000


def latest(traces: TraceStore, role: str, config: str, arm: str, count: int) -> list[Run]:
    """The newest `count` runs of (role, config, arm), oldest first (read in pages)."""
    key = stream_key(role, config, arm)
    newest_first: list[Run] = []
    high = "+"
    while len(newest_first) < count:
        with _redis_errors():
            entries = cast(StreamEntries, traces.connection.xrevrange(
                key, max=high, count=min(LATEST_PAGE, count - len(newest_first))))
        newest_first += [run_of_fields(fields) for _, fields in entries]
        if len(entries) < LATEST_PAGE:
            break
        last = entries[-1][0]
        high = "(" + (last.decode() if isinstance(last, bytes) else str(last))
    newest_first.reverse()
    return newest_first


def since(traces: TraceStore, role: str, config: str, arm: str, start: float | None,
          count: int = MAX_REPLAY) -> list[Run]:
    """Runs of (role, config, arm) that arrived at or after `start`, oldest first."""
    low = "-" if start is None else f"{max(0, int(start * 1000))}-0"
    with _redis_errors():
        entries = cast(StreamEntries, traces.connection.xrange(stream_key(role, config, arm),
                                                               min=low, max="+", count=count))
    return [run_of_fields(fields) for _, fields in entries]


def candidate_arm(stage: Stage) -> str:
    """Which trace arm carries the candidate's runs in `stage`."""
    return "shadow" if stage is Stage.SHADOW else "candidate"


def paired_section(ctx: GateContext) -> dict[str, Any] | None:
    """In shadow: current and shadow runs of the same jobs, paired and compared.

    The kept tally advanced over the runs since its last read (at most
    `paired_state.MAX_ADVANCE` per arm; `caught_up` is false while it is behind),
    plus how many keys wait for a mate and how many were dropped per arm.
    """
    binding = ctx.record.binding
    if binding.stage is not Stage.SHADOW or binding.candidate is None:
        return None
    trusted = binding.gate.trusted_reporters
    arms = Arms(ctx.role, ctx.epoch, binding.current, binding.candidate, binding.stage_since,
                None if trusted is None else frozenset(trusted))
    paired = PairedStates(ctx.traces.connection).advance(
        arms, binding.gate.invariants.required_tools)
    thresholds = binding.gate.thresholds
    # The exact McNemar look is taken once shadow has all its pairs, at its share of
    # the stage alpha (`budget.final_alpha`); decide() acts on it once, at the stage's end.
    view = paired.tally.report(alpha=final_alpha(thresholds.alpha, Stage.SHADOW),
                               min_samples=shadow_pairs_needed(thresholds)).as_dict()
    view["caught_up"] = paired.caught_up
    view["waiting"] = paired.waiting
    view["dropped"] = paired.dropped
    view["last_ids"] = {"current": paired.tally.last_current or None,
                        "shadow": paired.tally.last_shadow or None}
    return view


def reference_of(ctx: GateContext) -> WindowStats:
    """What p0 is measured over: current's stage runs plus its carried history.

    The history (`gatekeeper.store.history`: the current config's newest runs
    before the stage) gives the tests a p0 from the stage's first tick, and in
    `full`, where the current arm gets no traffic, the only one there is. Only
    the counts a p0 is read from (`drift.window_rate`), all the history keeps,
    are merged: a stage window holds some 20,000 fields.
    """
    binding = ctx.record.binding
    _, stage = ctx.arms["current"]
    carried = HistoryStore(ctx.traces.connection).before(ctx.role, binding.current, ctx.epoch,
                                                         binding.stage_since)
    counts = {"n": stage.n, "passes": stage.passes, "error_runs": stage.error_runs,
              "forbidden": stage.forbidden}
    return WindowStats(counts).merge(carried)


def drift_section(ctx: GateContext) -> DriftView:
    """CUSUM per metric: the candidate's stage runs against current's rates, and current alone.

    Both arms' detectors take p0 from the current config's runs, over the stage and
    carried from before it (`reference_of`, once they hold `min_samples` runs),
    at its upper bound, or from `drift.baseline`; h is derived for that p0 unless
    the policy fixes it. They count the stage's runs from its first; `caught_up`
    is false while one is still catching up.
    """
    binding = ctx.record.binding
    policy = binding.gate.drift
    if not policy.enabled:
        view = disabled_view()
        view["alert"] = False
        return drift_view(view)
    thresholds = binding.gate.thresholds
    reference = reference_of(ctx)  # read and merged once: a stage window holds ~20,000 fields
    wanted = {metric: params for metric in METRICS
              if (params := params_for(metric, policy, reference,
                                       thresholds.min_samples, thresholds.alpha)) is not None}
    watches = {"current": Watch(binding.current, "current", binding.stage_since, wanted)}
    if binding.candidate is not None and binding.stage in (Stage.SHADOW, Stage.CANARY,
                                                            Stage.FULL):
        watches["candidate"] = Watch(binding.candidate, candidate_arm(binding.stage),
                                     binding.stage_since, wanted)
    states = DriftStates(ctx.traces.connection).advance(ctx.role, ctx.epoch,
                                                        list(watches.values()))
    shown = {name: {m: d.as_dict(done.caught_up) for m, d in done.detectors.items()}
             for name, done in zip(watches, states)}
    view = section(shown.get("candidate", {}), shown["current"], policy)
    view["caught_up"] = all(done.caught_up for done in states)
    view["alert"] = any(a["arm"] == "current" for a in view["alarms"])
    return drift_view(view)
