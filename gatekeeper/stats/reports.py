"""Runs that never arrive: assigned against reported, per arm, valid at every look. Pure.

A candidate whose agent crashes, hangs or is killed before it reports leaves no
trace, so a pass rate over the traces that did arrive describes the survivors.
The router counts every assignment (HTTP resolves, and the SDK's in-process
resolves it is sent) per role, config, arm, stage epoch and report bucket of
30 s (`rolegate.exposures.BUCKET_S`, fixed: the SDK counts in it); ingest counts
every arriving run in the report bucket its run started in (`time -
latency_s`). A bucket counts once it ended `gate.reports.grace_seconds` ago
(`REPORT_GRACE_S` by default: runs report some seconds after their resolve, and
a run still in flight is not missing).

Per closed bucket the candidate's and current's assigned runs and their runs
that never reported make one `concurrent.Cell` (the event: never reported), and
`concurrent_test` tests "the candidate's runs go missing no more often than
current's over the same minutes" at REPORTS_SHARE of the stage alpha, valid at
every look (Ville); the comparison conditions on each bucket's missing runs,
so a reporter outage that hits both arms alike is no evidence against the
candidate (the sequential SRM idea of Lindon, Semmens and Gotwalt 2022, on
reports rather than assignments).

The verdicts:

- ``short``: the test rejects: roll back, naming both rates;
- ``both_short``: current's own report rate is under MIN_REPORT_RATE (both arms
  short, a reporter gone): no candidate causes that, so alert and hold, never
  roll back on the report test;
- ``lagging``: the candidate reports less than current by more than
  LAG_MARGIN but the test has not rejected yet: hold promotion;
- ``ok``, or ``insufficient`` before any bucket closed with runs in both arms.

A bucket's reports can exceed its assignments (a flush that landed a resolve a
bucket late): its missing count is floored at 0, the same way in both arms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bindings.reports_policy import DEFAULT_GRACE_S
from gatekeeper.stats.concurrent import Cell, concurrent_test
from gatekeeper.stats.missing import mature_before as _mature_before

#: Seconds after a bucket's end before its runs are expected to have reported.
REPORT_GRACE_S = DEFAULT_GRACE_S
#: Under this report rate in current's own arm the reporting itself is broken.
MIN_REPORT_RATE = 0.95
#: How far under current's rate the candidate's may be before promotion waits.
LAG_MARGIN = 0.02

OK = "ok"
SHORT = "short"
BOTH_SHORT = "both_short"
LAGGING = "lagging"
INSUFFICIENT = "insufficient"

#: Per arm: bucket -> count.
Buckets = Mapping[int, int]


def mature_before(now: float, grace_s: float = REPORT_GRACE_S) -> int:
    """The first bucket whose runs may still be in flight at `now`: buckets below it count."""
    return _mature_before(now, grace_s)


@dataclass(frozen=True)
class ReportCheck:
    """Assigned and reported per arm over the mature buckets, the test, and the verdict."""

    verdict: str
    assigned: tuple[int, int]
    reported: tuple[int, int]
    log_e: float
    threshold: float
    alpha: float
    before: int
    grace_s: float = REPORT_GRACE_S

    def rate(self, arm: int) -> float | None:
        """Arm 0 (candidate) or 1 (current): reported / assigned, None with none assigned."""
        return self.reported[arm] / self.assigned[arm] if self.assigned[arm] else None

    def reason(self) -> str:
        """One sentence naming both arms' report rates."""
        cand, cur = self.rate(0), self.rate(1)
        figures = (f"candidate reported {self.reported[0]} of {self.assigned[0]} assigned runs "
                   f"({_pct(cand)}), current {self.reported[1]} of {self.assigned[1]} "
                   f"({_pct(cur)})")
        if self.verdict == SHORT:
            return (f"report rate: {figures}; evidence e^{self.log_e:.2f} >= "
                    f"e^{self.threshold:.2f} that the candidate's runs go missing more often")
        if self.verdict == BOTH_SHORT:
            return (f"reports missing in both arms: {figures}; current is under "
                    f"{MIN_REPORT_RATE:.0%}, so no candidate causes this (a reporter gone?)")
        return f"report rate: {figures}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the gate view's `reports` section."""
        return {"verdict": self.verdict,
                "assigned": {"candidate": self.assigned[0], "current": self.assigned[1]},
                "reported": {"candidate": self.reported[0], "current": self.reported[1]},
                "rate": {"candidate": self.rate(0), "current": self.rate(1)},
                "log_e": round(self.log_e, 4), "threshold": round(self.threshold, 4),
                "alpha": self.alpha, "mature_before": self.before,
                "grace_s": self.grace_s, "reason": self.reason()}


def report_check(candidate: tuple[Buckets, Buckets], current: tuple[Buckets, Buckets],
                 before: int, alpha: float, grace_s: float = REPORT_GRACE_S) -> ReportCheck:
    """Test the candidate's (assigned, reported) buckets against current's, below `before`.

    `alpha` is the test's own level (REPORTS_SHARE of the stage alpha); `grace_s` the
    grace `before` was taken with (shown).
    """
    cells = []
    assigned = [0, 0]
    reported = [0, 0]
    for bucket in sorted(candidate[0].keys() | current[0].keys()):
        if bucket >= before:
            continue
        counts = []
        for arm, (given, arrived) in enumerate((candidate, current)):
            n = int(given.get(bucket, 0))
            got = min(n, int(arrived.get(bucket, 0)))
            assigned[arm] += n
            reported[arm] += got
            counts += [n, n - got]
        cells.append(Cell(counts[0], counts[1], counts[2], counts[3], bucket))
    test = concurrent_test(cells, alpha)
    args = (tuple(assigned), tuple(reported), test.log_e, test.threshold, alpha, before, grace_s)
    if not assigned[0] or not assigned[1]:
        return ReportCheck(INSUFFICIENT, *args)  # type: ignore[arg-type]
    cand_rate, cur_rate = reported[0] / assigned[0], reported[1] / assigned[1]
    if cur_rate < MIN_REPORT_RATE:
        verdict = BOTH_SHORT
    elif test.reject:
        verdict = SHORT
    elif cand_rate < cur_rate - LAG_MARGIN:
        verdict = LAGGING
    else:
        verdict = OK
    return ReportCheck(verdict, *args)  # type: ignore[arg-type]


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1%}"
