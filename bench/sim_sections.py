"""The gate view of a simulated stage, built by the functions `gatekeeper.view` builds it with.

`gate.evaluate(...).to_json()` per arm, the paired tally's `report` at
`budget.final_alpha`, the `concurrent` section (`gatekeeper.view.concurrent`,
kept as a fold advanced as buckets close), the `rollout` section
(`Carried.as_dict`), the report check (`stats.reports.report_check`, as
`view.reports` calls it), the criterion tests (`criteria_gate.criteria_tests`,
as `view.criteria.gate_section` calls them) and the drift section; `decision`
reads it back with `decide.evidence_from_view` and judges it with
`decide.decide`. Who reads it, and when: `bench.sim_view`.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from bench.sim_state import CE, CF, CN, KE, KF, KN, StageCounts
from bindings.models import GatePolicy, Stage, VersionedBinding
from gatekeeper.gate import evaluate
from gatekeeper.machine.decide import (
    Decision,
    decide,
    evidence_from_view,
    shadow_pairs_needed,
)
from gatekeeper.stats.budget import REPORTS_SHARE, final_alpha
from gatekeeper.stats.concurrent import Cell, Comparison, CusumState, cells_of, closed_before
from gatekeeper.stats.criteria_gate import KeyCounts, acting, criteria_tests
from gatekeeper.stats.drift import (
    RUN_FAILURE,
    SETTLED_REFERENCE,
    Detector,
    Params,
    bounded_p0,
    params_for,
    section,
)
from gatekeeper.stats.missing import FAIL, Missing, applies, cell_bucket, missing_of
from gatekeeper.stats.pair_tally import Tally
from gatekeeper.stats.reports import mature_before, report_check
from gatekeeper.stats.sequential import THETAS
from gatekeeper.view.concurrent import METRICS, Folded, section_of
from gatekeeper.view_model import DriftView, GateView, RolloutView, arm_view, drift_view
from gatekeeper.view_model.concurrent import ConcurrentView, concurrent_view
from gatekeeper.view_model.criteria import criteria_view
from gatekeeper.view_model.paired import PairedView
from gatekeeper.view_model.reports import reports_view
from gatekeeper.window import WindowStats

#: The most one pass->fail flip raises the flips' log ratio (`sequential.log_ratio`).
MAX_FLIP = math.log(2.0 * max(THETAS))
#: Criterion keys the simulator gates on (`World.criteria`), in order.
CRITERION_KEYS = ("c1", "c2", "c3", "c4", "c5", "c6")

_ARMS: dict[tuple[int, int, int], dict[str, Any]] = {}
#: Policies seen by the memos, kept alive so their ids stay theirs.
_POLICIES: dict[int, GatePolicy] = {}


def _arm_json(n: int, passes: int, policy: GatePolicy) -> dict[str, Any]:
    """`gate.evaluate(...).to_json()` of an arm's counts (memoized: evaluate is pure)."""
    key = (n, passes, id(policy))
    found = _ARMS.get(key)
    if found is None:
        _POLICIES[id(policy)] = policy
        if len(_ARMS) > 200_000:
            _ARMS.clear()
        found = _ARMS[key] = evaluate(WindowStats({"n": n, "passes": passes}), policy).to_json()
    return found


_PAIRS: dict[tuple[int, int, int, float, int], PairedView] = {}


def paired_report(pairs: int, regressions: int, improvements: int, alpha: float,
                  needed: int) -> PairedView:
    """The paired tally's report of those counts, as the view's model (memoized, pure)."""
    key = (pairs, regressions, improvements, alpha, needed)
    found = _PAIRS.get(key)
    if found is None:
        if len(_PAIRS) > 200_000:
            _PAIRS.clear()
        tally = Tally(pairs=pairs, regressions=regressions, improvements=improvements)
        found = _PAIRS[key] = PairedView.model_validate(
            tally.report(alpha=alpha, min_samples=needed).as_dict())
    return found


def verdict_class(n: int, passes: int, policy: GatePolicy) -> int:
    """What decide() reads of an arm's verdict with these counts and no zero-tolerance
    event: 0 too few runs (min_samples), 1 under min_pass_rate, 2 passing (as
    `gate.evaluate` decides them)."""
    thresholds = policy.thresholds
    if n < thresholds.min_samples:
        return 0
    return 1 if passes / n < thresholds.min_pass_rate else 2


def _cells(buckets: list[list[Any]]) -> dict[str, list[Cell]]:
    """Each metric's cells of whole buckets, oldest first, strata in order (as `cells_of`)."""
    out: dict[str, list[Cell]] = {m: [] for m in METRICS}
    failure, error, forbidden = (out[m] for m in METRICS)
    for bucket, strata in buckets:
        for stratum in sorted(strata):
            c = strata[stratum]
            failure.append(Cell(c[CN], c[CF], c[KN], c[KF], bucket, stratum))
            error.append(Cell(c[CN], c[CE], c[KN], c[KE], bucket, stratum))
            forbidden.append(Cell(c[CN], 0, c[KN], 0, bucket, stratum))
    return out


def fold_to(counts: StageCounts, record: VersionedBinding, before: int) -> Folded:
    """The stage's fold advanced over every bucket below `before` not yet in it."""
    folded = counts.folded or Folded.start(record.binding)
    if folded.before != before:
        ready = []
        while counts.buckets and counts.buckets[0][0] < before:
            ready.append(counts.buckets.popleft())
        folded = folded.advance(_cells(ready), before)
    counts.folded = folded
    return folded


def missing_of_stage(counts: StageCounts, record: VersionedBinding,
                     now: float) -> Missing | None:
    """The runs the comparison counts as failed (`view.reports.missing_for`): None unless
    runs can go missing here and the policy says "fail" and can be applied."""
    binding = record.binding
    policy = binding.gate.reports
    if counts.reports is None or policy.missing_runs != FAIL or applies(binding) is not None:
        return None
    return missing_of(counts.reports.candidate, counts.reports.current,
                      mature_before(now, policy.grace_seconds))


def _fold_missing(counts: StageCounts, record: VersionedBinding, missing: Missing,
                  upto: int) -> tuple[Comparison, CusumState]:
    """The run-failure fold with the missing runs as failed runs (`missing.with_missing`),
    advanced over the comparison buckets below `upto` (each final once counted)."""
    compared, state, done = counts.cache.get("missing_fold") or (
        Folded.start(record.binding).metrics[RUN_FAILURE] + (-sys.maxsize,))
    if upto <= done:
        return compared, state
    extra: dict[int, list[int]] = {}
    for arm, gone in ((0, missing.candidate), (1, missing.current)):
        for report_bucket, m in gone.items():
            cell = cell_bucket(report_bucket)
            if done <= cell < upto:
                extra.setdefault(cell, [0, 0])[arm] += m
    raw = counts.raw
    ready: dict[int, dict[str, list[int]]] = {}
    while raw and raw[0][0] < upto:
        bucket, strata = raw.popleft()
        ready[bucket] = strata
    cells = []
    for bucket in sorted(ready.keys() | extra.keys()):
        strata = dict(ready.get(bucket, {}))
        if bucket in extra:
            m_cand, m_cur = extra[bucket]
            c = list(strata.get("", [0] * 6))
            c[CN], c[CF], c[KN], c[KF] = c[CN] + m_cand, c[CF] + m_cand, c[KN] + m_cur, \
                c[KF] + m_cur
            strata[""] = c
        for stratum in sorted(strata):
            c = strata[stratum]
            cells.append(Cell(c[CN], c[CF], c[KN], c[KF], bucket, stratum))
    found = (compared.fold(cells), state.fold(cells), upto)
    counts.cache["missing_fold"] = found
    return found[0], found[1]


def fast_section(counts: StageCounts, record: VersionedBinding, now: float) -> dict[str, Any]:
    """The `concurrent` section at `now` from the kept folds: `section_of`'s, to the bit."""
    binding = record.binding
    before = closed_before(now)
    folded = fold_to(counts, record, before)
    missing = missing_of_stage(counts, record, now)
    if missing is None:
        return folded.section(binding)
    upto = missing.counted_before(before)
    added = missing.added(upto)
    shown = {"counted_before": upto, "candidate": added[0], "current": added[1],
             "unadjusted": folded.metrics[RUN_FAILURE][0].as_dict()}
    adjusted = {**folded.metrics, RUN_FAILURE: _fold_missing(counts, record, missing, upto)}
    return Folded(before, adjusted).section(binding, shown)


def stage_comparison(counts: StageCounts, record: VersionedBinding) -> Comparison:
    """The finished stage's run-failure comparison over all its cells, closed or not (what
    `store.rollout` carries)."""
    if counts.literal:
        return Comparison.of(cells_of(counts.cand_cells.cells(RUN_FAILURE),
                                      counts.cur_cells.cells(RUN_FAILURE)))
    folded = counts.folded or Folded.start(record.binding)
    return folded.metrics[RUN_FAILURE][0].fold(_cells(list(counts.buckets))[RUN_FAILURE])


def _criteria(counts: StageCounts, record: VersionedBinding) -> list[KeyCounts]:
    """Each gated key's counts, as `view.criteria.gate_counts` gives them."""
    assert counts.criteria is not None
    shadow = record.binding.stage is Stage.SHADOW
    return [KeyCounts(key, *found) for key, found in
            zip(CRITERION_KEYS, counts.criteria.counts(shadow))]


def criteria_key(counts: StageCounts, record: VersionedBinding) -> tuple[str, ...]:
    """The criterion keys whose test acts now (decide() acts on `acting` of these tests)."""
    gate = record.binding.gate
    verdicts = criteria_tests(_criteria(counts, record), gate.criteria, gate.thresholds.alpha)
    zero, rejected = acting(verdicts)
    return tuple(v.counts.key for v in zero) + ("/",) + tuple(v.counts.key for v in rejected)


def _reports(counts: StageCounts, record: VersionedBinding, now: float) -> dict[str, Any]:
    """The `reports` section (`view.reports.reports_section`)."""
    assert counts.reports is not None
    binding = record.binding
    policy = binding.gate.reports
    judged = "shadow" if binding.stage is Stage.SHADOW else "candidate"
    check = report_check(counts.reports.candidate, counts.reports.current,
                         mature_before(now, policy.grace_seconds),
                         REPORTS_SHARE * binding.gate.thresholds.alpha, policy.grace_seconds)
    why_not = applies(binding) if policy.missing_runs == FAIL else None
    return {"arm": judged, **check.as_dict(),
            "missing_runs": {"policy": policy.missing_runs,
                             "applied": policy.missing_runs == FAIL and why_not is None,
                             "why_not": why_not}}


def view_of(record: VersionedBinding, counts: StageCounts, now: float,
            fast: bool = False) -> GateView:
    """The parts of the gate view decide() reads, built by the view's own functions
    (`GateView.model_construct`: the header and the sections decide() does not read are
    left out).

    `fast`: the concurrent section from the kept fold, each arm's JSON kept while its
    verdict class holds, the report section while no bucket matured (`Reader`).
    """
    binding = record.binding
    policy = binding.gate
    thresholds = policy.thresholds
    judged = "shadow" if binding.stage is Stage.SHADOW else "candidate"
    cache = counts.cache
    if fast:
        arms = {}
        for arm, n, passes in (("current", counts.cur_n, counts.cur_passes),
                               (judged, counts.cand_n, counts.cand_passes)):
            found = cache.get(arm)
            cls = verdict_class(n, passes, policy)
            if found is None or found[0] != cls:
                found = cache[arm] = (cls, arm_view(_arm_json(n, passes, policy)))
            arms[arm] = found[1]
    else:
        arms = {"current": arm_view(_arm_json(counts.cur_n, counts.cur_passes, policy)),
                judged: arm_view(_arm_json(counts.cand_n, counts.cand_passes, policy))}
    view: dict[str, Any] = {"stage": binding.stage, "arms": arms, "paired": None}
    if binding.stage is Stage.SHADOW:
        view["paired"] = paired_report(counts.pairs, counts.regressions, counts.improvements,
                                      final_alpha(thresholds.alpha, Stage.SHADOW),
                                      shadow_pairs_needed(thresholds))
    view["drift"] = drift_of(counts, record, fast)
    if counts.concurrent:
        if fast:
            view["concurrent"] = cached_section(counts, record, now)
        else:
            view["concurrent"] = concurrent_view(section_of(
                counts.cand_cells, counts.cur_cells, binding, now,
                missing_of_stage(counts, record, now)))
    if counts.rollout is not None:
        if "rollout" not in cache:
            cache["rollout"] = RolloutView.model_validate(counts.rollout.as_dict(binding))
        view["rollout"] = cache["rollout"]
    if counts.reports is not None:
        mature = mature_before(now, policy.reports.grace_seconds)
        found = cache.get("reports")
        if not fast or found is None or found[0] != mature:
            found = cache["reports"] = (mature, reports_view(_reports(counts, record, now)))
        view["reports"] = found[1]
    if counts.criteria is not None:
        tests = criteria_tests(_criteria(counts, record), policy.criteria, thresholds.alpha)
        view["by_criterion"] = criteria_view({"gate": {judged: [v.as_dict() for v in tests]}})
    return GateView.model_construct(**view)


def cached_section(counts: StageCounts, record: VersionedBinding,
                   now: float) -> ConcurrentView:
    """`fast_section` as the view's model, kept while no bucket closed and no report bucket
    matured (it cannot change in between)."""
    key = (closed_before(now), None if counts.reports is None else
           mature_before(now, record.binding.gate.reports.grace_seconds))
    found = counts.cache.get("concurrent")
    if found is None or found[0] != key:
        found = counts.cache["concurrent"] = (key, ConcurrentView.model_validate(
            fast_section(counts, record, now)))
    return found[1]


#: `drift.bounded_p0` of (failures, runs), memoized (pure; the same counts recur across
#: rollouts).
_BOUNDED: dict[tuple[int, int], float] = {}


def kept_params(counts: StageCounts, policy: GatePolicy) -> Params | None:
    """The run-failure detector's params as the view keeps them at this read: p0 from
    current's stage runs and its carried history (`drift.params_for`), the detector
    restarted with fresh ones only when `Detector.outdated` says so (a changed h, a
    reference since doubled), so its p0 and reference hold between restarts. None while
    the reference is too small to show one. Call it at every read, as the view runs.

    (Read after every run this is the reader's most frequent call, so the common case is
    short. A measured p0 (over the same reference, it keeps its share and shift) gives
    either the kept p0 and so the kept h, or, with h derived for p0, an h that only
    follows it: neither restarts the detector while the reference has not doubled.)"""
    drift, thresholds = policy.drift, policy.thresholds
    n = counts.cur_n + counts.carried_n
    kept = counts.detector
    if kept is not None and RUN_FAILURE not in drift.baseline and n >= max(
            1, thresholds.min_samples):
        mine = kept.params
        if mine.reference > 0 and not (
                mine.reference < SETTLED_REFERENCE and n >= 2 * mine.reference):
            if mine.derived and drift.h is None:
                return mine
            failures = n - counts.cur_passes - counts.carried_passes
            p0 = _BOUNDED.get((failures, n))
            if p0 is None:
                if len(_BOUNDED) > 1_000_000:
                    _BOUNDED.clear()
                p0 = _BOUNDED[(failures, n)] = bounded_p0(failures / n, n)
            if p0 == mine.p0:
                return mine
    current = WindowStats({"n": counts.cur_n, "passes": counts.cur_passes})
    wanted = params_for(RUN_FAILURE, drift, current.merge(counts.carried),
                        thresholds.min_samples, thresholds.alpha)
    if wanted is None:
        return None
    if kept is None or kept.outdated(wanted):
        counts.detector = kept = Detector(RUN_FAILURE, wanted)
    return kept.params


def drift_of(counts: StageCounts, record: VersionedBinding, fast: bool) -> DriftView:
    """The drift section: the candidate's run-failure detector, p0 from current's stage runs
    and its carried history at the upper bound (what the power hold sizes its alternative
    with, and, without the concurrent section, what the tests run against), kept while not
    `outdated` and advanced over the stage's candidate runs. `fast`, with the concurrent
    section: not advanced (its CUSUM only shows there; its p0 and reference are the same),
    and `kept_params` already ran at this read."""
    policy = record.binding.gate
    shown = {}
    if fast and counts.concurrent:
        params = kept_params(counts, policy)
        if params is not None:
            shown = {RUN_FAILURE: Detector(RUN_FAILURE, params).as_dict(True)}
        return drift_view(section(shown, {}, policy.drift))
    if kept_params(counts, policy) is not None:
        assert counts.detector is not None
        # The store hands a detector only the entries after its last id.
        counts.detector = detector = counts.detector.advance(
            counts.entries[counts.detector.n:])
        shown = {RUN_FAILURE: detector.as_dict(True)}
    return drift_view(section(shown, {}, policy.drift))


def decision(record: VersionedBinding, counts: StageCounts, now: float,
              fast: bool = False) -> Decision:
    return decide("sim", record, evidence_from_view(view_of(record, counts, now, fast)), now)
