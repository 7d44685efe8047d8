"""Runs assigned but never reported, counted as failed runs (`gate.reports.missing_runs`). Pure.

The report-rate test (`gatekeeper.stats.reports`) asks whether the candidate's
runs go missing more often than current's. This module answers the other
question users of experimentation platforms expect answered: what is the
candidate's failure rate over every run it was *assigned*, a run that never
reported counted as a failure? Under the policy "fail" each arm's missing runs
(assigned minus reported per report bucket, floored at 0, over buckets past
the policy's grace) join that arm's failed runs in the run-failure comparison
with concurrent current (`gatekeeper.stats.concurrent`), in both arms by the
same rule, so a reporter outage that loses both arms' runs alike is no
evidence against the candidate (a shared shift, as an outage is).

**Which cell a bucket's missing runs join.** Exposures are counted by the
run's *start* (its resolve) in report buckets of `REPORT_BUCKET_S` (30 s, the
SDK's and the router's exposure buckets), and so are the runs that arrived
(`time - latency_s`); the comparison's cells are by the run's start too, in
buckets of `concurrent.BUCKET_S`. So a report bucket's missing runs join their
own start cell: the bucketed-jobs cell ("" stratum) holding the report bucket's
last second (with the default 30 s cells, the very bucket; with shorter ones the
last of the cells it spans, which closes last), the same rule in both arms, so
within a cell the two arms' finished and missing runs started in the same
minutes. (Before cells were filed by start, a cell's finished runs had started
up to one run's length earlier than its missing ones.)

**When such a cell counts.** A cell enters the comparison once: its bucket has
closed (before the report horizon, `concurrent.report_horizon`) and every
report bucket joining it is either past the policy's grace or has no run left
unreported in either arm (reports only grow, exposures of a bucket are in
within about a second of its end, so "none missing" stays true). The first cell
that fails this stops the count (`counted_before`): the cells counted are a
prefix, each entered with its final counts, so the e-value changes only when a
cell enters and the CUSUM runs over the same path at every read. Where runs are
in flight, the run-failure evidence of a cell therefore waits up to the grace
(120 s by default) or the horizon, whichever is later.

**What it cannot see.** Exposures are not split by targeting rule, so missing
runs cannot be put in the rule's stratum; while a rule can pick an arm (canary
and full, `applies`) the policy is not applied (pooling them would compare one
population's missing runs with another's: issue 23's Simpson case), and the
view says so. A run that reports after its bucket's grace counted as missing
until it arrived; once it does, its bucket's missing count falls again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bindings.models import Binding, Stage
from gatekeeper.stats import concurrent
from rolegate import exposures

#: Seconds per report bucket: the width the SDK and the router count exposures in
#: (fixed: the SDK cannot read the service's ROLEGATE_BUCKET_SECONDS).
REPORT_BUCKET_S: int = exposures.BUCKET_S
FAIL = "fail"
IGNORE = "ignore"
#: Per arm: bucket -> count.
Buckets = Mapping[int, int]
#: Per arm: (bucket, stratum) -> (runs, failed runs), as `concurrent.cells_of` takes them.
Counts = Mapping[tuple[int, str], tuple[int, int]]


def mature_before(now: float, grace_s: float) -> int:
    """The first report bucket whose runs may still be in flight at `now` (those below
    it ended at least `grace_s` ago)."""
    return int((now - grace_s) // REPORT_BUCKET_S)


def cell_bucket(report_bucket: int) -> int:
    """The comparison's time bucket a report bucket's missing runs join: their own start
    cell, the one holding the report bucket's last second."""
    return (REPORT_BUCKET_S * (report_bucket + 1) - 1) // concurrent.BUCKET_S


def applies(binding: Binding) -> str | None:
    """Why the policy "fail" cannot be applied to `binding` now (None: it can)."""
    if binding.rules and binding.stage in (Stage.CANARY, Stage.FULL):
        return ("targeting rules pick arms in this stage and exposures are not counted per "
                "rule, so missing runs are not counted as failed (the report-rate test still "
                "runs)")
    return None


@dataclass(frozen=True)
class Missing:
    """Each arm's missing runs per mature report bucket, and the first cell that must wait."""

    #: report bucket -> runs assigned and never reported (mature buckets, > 0 only).
    candidate: Mapping[int, int]
    current: Mapping[int, int]
    #: The first comparison bucket whose cell waits (a report bucket joining it is in its
    #: grace with runs unreported); None: none waits.
    waiting_from: int | None = None

    def counted_before(self, closed_before: int) -> int:
        """The first comparison bucket not counted: closed, and nothing joining it waits."""
        if self.waiting_from is None:
            return closed_before
        return min(closed_before, self.waiting_from)

    def added(self, before: int) -> tuple[int, int]:
        """(candidate, current) missing runs that joined cells below `before`."""
        return (sum(m for r, m in self.candidate.items() if cell_bucket(r) < before),
                sum(m for r, m in self.current.items() if cell_bucket(r) < before))


def missing_of(candidate: tuple[Buckets, Buckets], current: tuple[Buckets, Buckets],
               mature: int) -> Missing:
    """Each arm's (assigned, reported) per report bucket into its missing runs.

    `mature`: the first report bucket still in its grace (`mature_before`).
    """
    gone: list[dict[int, int]] = [{}, {}]
    waiting: int | None = None
    for arm, (assigned, reported) in enumerate((candidate, current)):
        for bucket, n in assigned.items():
            # A run is assigned at its resolve and filed as reported by when it started,
            # a moment later: one resolved at the end of a bucket starts in the next. The
            # next bucket's surplus of reports covers this bucket's shortfall, so the
            # gap between resolve and start makes no phantom missing runs.
            later = int(reported.get(bucket + 1, 0)) - int(assigned.get(bucket + 1, 0))
            short = max(0, int(n) - int(reported.get(bucket, 0)) - max(0, later))
            if not short:
                continue
            if bucket < mature:
                gone[arm][bucket] = short
            else:
                cell = cell_bucket(bucket)
                waiting = cell if waiting is None else min(waiting, cell)
    return Missing(gone[0], gone[1], waiting)


def with_missing(candidate: Counts, current: Counts,
                 missing: Missing) -> tuple[dict[tuple[int, str], tuple[int, int]],
                                            dict[tuple[int, str], tuple[int, int]]]:
    """Each arm's run-failure counts with its missing runs added as failed runs to the
    bucketed-jobs cell of the bucket they join."""
    out = []
    for counts, gone in ((candidate, missing.candidate), (current, missing.current)):
        cells = dict(counts)
        for report_bucket, m in gone.items():
            key = (cell_bucket(report_bucket), "")
            n, failed = cells.get(key, (0, 0))
            cells[key] = (n + m, failed + m)
        out.append(cells)
    return out[0], out[1]

