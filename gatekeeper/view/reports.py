"""The gate view's `reports` section: assigned against reported, per arm (`gatekeeper.stats.reports`).

Also what the `missing_runs` policy (`gate.reports`, `gatekeeper.stats.missing`)
adds: the runs each arm was assigned and never reported, handed to the
`concurrent` section (where they count as failed runs under "fail") and shown
beside each arm's pass rate (`merge_missing`). The exposure hashes, and each
reporter's own reports of the buckets it counted, are read once per view
(`report_counts`), with each reporter's runs that carry ids matched run by run
(`gatekeeper.stats.matching`; `runs` shows them). Each reporter's assignments are
set against its own reports;
with `trusted_reporters` in the policy only theirs are read, as only their runs
count; only the reporters whose missing runs say something about a config
(`ReporterFigures.counted`) add missing runs.
"""

from __future__ import annotations

from typing import Any

from bindings.models import Stage
from gatekeeper.stats.budget import REPORTS_SHARE
from gatekeeper.stats.matching import ID_REPORTED, RunIds, matched_reports, run_figures
from gatekeeper.stats.missing import (
    FAIL,
    REPORT_BUCKET_S,
    Missing,
    applies,
    mature_before,
    missing_of,
)
from gatekeeper.stats.reports import report_check_by, reporter_figures
from gatekeeper.stats.units import lag_quantile
from gatekeeper.store.exposures import ExposureStore
from gatekeeper.store.run_matches import RunMatchStore
from gatekeeper.store.traces import WINDOW_TTL_S
from gatekeeper.view.context import GateContext

#: Per arm: ({bucket: assigned}, {bucket: reported}).
ArmCounts = tuple[dict[int, int], dict[int, int]]


class ReportCounts(dict[str, tuple[ArmCounts, ArmCounts]]):
    """Per reporter: (the judged arm's counts, current's), "reported" being assigned minus
    missing (`gatekeeper.stats.matching`: runs with ids matched one by one); and per arm
    (judged, current) each reporter's runs with ids (`runs`), for the section's figures."""

    def __init__(self, counts: dict[str, tuple[ArmCounts, ArmCounts]],
                 runs: tuple[dict[str, RunIds], dict[str, RunIds]] = ({}, {}),
                 mature: int = 0) -> None:
        super().__init__(counts)
        self.runs = runs
        self.mature = mature


def judged_arm(ctx: GateContext) -> str | None:
    """The arm the stage judges against current; None outside a live rollout."""
    binding = ctx.record.binding
    if binding.candidate is None or binding.stage not in (Stage.SHADOW, Stage.CANARY,
                                                          Stage.FULL):
        return None
    return "shadow" if binding.stage is Stage.SHADOW else "candidate"


#: An arm assigned runs that has reported fewer than `units.MIN_LAG_REPORTS` of them is
#: waited for this many graces: one whose reports merely come late is not found short,
#: and one that never reports is still found missing after it.
SILENT_GRACES = 10


def report_wait(ctx: GateContext) -> float:
    """Seconds after a report bucket's end before its runs count as reported or missing.

    The policy's `grace_seconds`, or longer: each arm's p99 lag from a run's start to
    its report (`window.LAG`, what the concurrent cells wait for too). A candidate whose
    runs take longer than the grace, or whose reports come later, is waited for, never
    found short for it (issue 34); an arm with runs and fewer than 5 lags, SILENT_GRACES
    graces.
    """
    grace = float(ctx.record.binding.gate.reports.grace_seconds)
    judged = judged_arm(ctx)
    waits = [grace]
    for arm in () if judged is None else (judged, "current"):
        lags = ctx.arms[arm][1].lag_histogram()
        found = lag_quantile(lags) if lags else None
        waits.append(found if found is not None else SILENT_GRACES * grace)
    return max(waits)


def report_counts(ctx: GateContext) -> ReportCounts | None:
    """Each arm's assigned and reported runs per report bucket; None outside a live rollout.

    A reporter's runs with ids are matched run by run (`run_matches`, `stats.matching`):
    its "reported" is what was assigned less what is missing; without ids, as reported.
    """
    judged = judged_arm(ctx)
    if judged is None:
        return None
    store = ExposureStore(ctx.traces.connection)
    matches = RunMatchStore(ctx.traces.connection, WINDOW_TTL_S)
    trusted = ctx.record.binding.gate.trusted_reporters
    mature = mature_before(ctx.now, report_wait(ctx))
    per_arm = []
    runs: list[dict[str, RunIds]] = []
    for arm in (judged, "current"):
        config, window = ctx.arms[arm]
        assigned = store.by_reporter(ctx.role, config, arm, ctx.epoch)
        if trusted is not None:
            assigned = {name: b for name, b in assigned.items() if name in trusted}
        got = _read_already(ctx, arm, assigned, trusted is not None)
        if got is None:
            got = store.reports_of(ctx.role, config, arm, ctx.epoch, assigned)
        reported, id_reported = got
        own = matches.read(ctx.role, config, arm, ctx.epoch, assigned,
                           mature * REPORT_BUCKET_S) if assigned else {}
        runs.append(own)
        per_arm.append((assigned, {
            name: matched_reports(given, reported.get(name, {}), id_reported.get(name, {}),
                                  own.get(name), mature)
            for name, given in assigned.items()}))
    names = per_arm[0][0].keys() | per_arm[1][0].keys()
    return ReportCounts({name: ((per_arm[0][0].get(name, {}), per_arm[0][1].get(name, {})),
                                (per_arm[1][0].get(name, {}), per_arm[1][1].get(name, {})))
                         for name in sorted(names)}, (runs[0], runs[1]), mature)


def _read_already(ctx: GateContext, arm: str, assigned: dict[str, dict[int, int]],
                  whole: bool) -> tuple[dict[str, dict[int, int]],
                                        dict[str, dict[int, int]]] | None:
    """Each reporter's reports per bucket, and those under minted run ids, when the context
    already holds them (None: read them): under `trusted_reporters` each reporter's whole
    window is in the context; else when one reporter sent every run of the arm, the arm's
    window is that reporter's."""
    windows = ctx.by_reporter.get(arm, {})
    if whole:
        return ({name: windows[name].reported_buckets() if name in windows else {}
                 for name in assigned},
                {name: windows[name].reported_buckets(ID_REPORTED) if name in windows else {}
                 for name in assigned})
    window = ctx.arms[arm][1]
    if len(windows) == 1 and set(assigned) <= set(windows):
        (name, own), = windows.items()
        if own.n == window.n:
            return {name: window.reported_buckets()}, {name: window.reported_buckets(ID_REPORTED)}
    if not windows:
        return {name: {} for name in assigned}, {name: {} for name in assigned}
    return None


def with_runs(section: dict[str, Any] | None,
              counts: ReportCounts | None) -> dict[str, Any] | None:
    """The section (a copy: a kept one is shared) with `runs`: per arm the runs with ids
    past the grace, `matched` and `missing`, and those `in_flight` (`stats.matching`), over
    the reporters whose missing runs count; the rest of the section reads them already."""
    if section is None or counts is None:
        return section
    counted = set(section.get("missing_runs", {}).get("counted_reporters") or ())
    return {**section, "runs": {arm: run_figures(runs, counts.mature, counted)
                                for arm, runs in zip(("candidate", "current"), counts.runs)}}


def reports_section(ctx: GateContext, counts: ReportCounts | None) -> dict[str, Any] | None:
    """The judged arm's report rate against current's, and the missing-runs policy; None
    outside a live rollout."""
    if counts is None:
        return None
    binding = ctx.record.binding
    policy = binding.gate.reports
    check = report_check_by(counts, mature_before(ctx.now, report_wait(ctx)),
                            REPORTS_SHARE * binding.gate.thresholds.alpha, policy.grace_seconds)
    why_not = applies(binding) if policy.missing_runs == FAIL else None
    counted = [f for f in check.reporters.values() if f.counted]
    return {"arm": judged_arm(ctx), **check.as_dict(),
            "missing_runs": {"policy": policy.missing_runs,
                             "applied": policy.missing_runs == FAIL and why_not is None,
                             "why_not": why_not,
                             "counted_reporters": sorted(
                                 n for n, f in check.reporters.items() if f.counted),
                             "missing": {arm: sum(f.assigned[i] - f.reported[i]
                                                  for f in counted)
                                         for i, arm in enumerate(("candidate", "current"))}}}


def missing_for(ctx: GateContext, counts: ReportCounts | None) -> Missing | None:
    """The runs the comparison counts as failed: None unless the policy says "fail" and
    can be applied (`gatekeeper.stats.missing.applies`)."""
    binding = ctx.record.binding
    policy = binding.gate.reports
    if counts is None or policy.missing_runs != FAIL or applies(binding) is not None:
        return None
    mature = mature_before(ctx.now, report_wait(ctx))
    counted = [n for n, f in reporter_figures(counts, mature).items() if f.counted]
    gone = missing_of(*_pooled(counts, counted), mature)
    if len(counted) == len(counts):
        return gone
    # Any reporter's runs still in flight make their cells wait: a cell enters once.
    waiting = missing_of(*_pooled(counts, list(counts)), mature).waiting_from
    return Missing(gone.candidate, gone.current, waiting)


def _pooled(counts: ReportCounts, names: list[str]) -> tuple[ArmCounts, ArmCounts]:
    """The named reporters' counts summed per arm and bucket, each reporter's reports
    capped at its own assignments (so one's extra reports never cover another's missing)."""
    if len(names) == 1:
        return counts[names[0]]  # missing_of floors each bucket: nothing to cap
    out: list[ArmCounts] = [({}, {}), ({}, {})]
    for name in names:
        for arm, (assigned, reported) in enumerate(counts[name]):
            for bucket, n in assigned.items():
                out[arm][0][bucket] = out[arm][0].get(bucket, 0) + n
                out[arm][1][bucket] = (out[arm][1].get(bucket, 0)
                                       + min(n, reported.get(bucket, 0)))
    return out[0], out[1]


def merge_missing(arms: dict[str, Any], reports: dict[str, Any] | None) -> None:
    """Beside the judged arm's and current's pass rate, the pass rate over every run
    assigned (a missing run counted as failed) where the policy applies.

    `arms.<arm>.counting_missing`: `missing` (assigned, never reported, over buckets past
    the grace), `n` (reported plus missing), `passes`, `pass_rate`; the arm's own `n` and
    `pass_rate` stay the reported runs' (the unadjusted figures).
    """
    if not reports or not (reports.get("missing_runs") or {}).get("applied"):
        return
    counted = reports["missing_runs"].get("missing") or {}
    for arm, key in ((reports.get("arm"), "candidate"), ("current", "current")):
        figures = arms.get(str(arm))
        if figures is None:
            continue
        missing = max(0, int(counted.get(key, 0)))
        n, passes = int(figures.get("n", 0)) + missing, int(figures.get("passes", 0))
        figures["counting_missing"] = {"missing": missing, "n": n, "passes": passes,
                                       "pass_rate": passes / n if n else None}
