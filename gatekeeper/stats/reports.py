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

Every count carries its reporter: the token that sent it, or that resolved
(`gatekeeper.store.exposures`), and each reporter's assignments are set against
its own reports, never another's: as runs are judged under `trusted_reporters`,
so a token cannot make an arm look short (or whole) with counts it sends.

Per closed bucket and reporter the candidate's and current's assigned runs and
their runs that never reported make one `concurrent.Cell` (the event: never
reported; a reporter with one arm only, or reporting none of its runs, adds no
evidence), and
`concurrent_test` tests "the candidate's runs go missing no more often than
current's over the same minutes" at REPORTS_SHARE of the stage alpha, valid at
every look (Ville); the comparison conditions on each bucket's missing runs,
so a reporter outage that hits both arms alike is no evidence against the
candidate (the sequential SRM idea of Lindon, Semmens and Gotwalt 2022, on
reports rather than assignments).

The verdicts:

- ``short``: the test rejects: roll back, naming both rates. Read first: no
  other verdict hides it;
- ``both_short``: a reporter reports under MIN_REPORT_RATE of its own current
  runs (a reporter gone, or one counting runs it never reports): no candidate
  causes that, so alert and hold, never roll back on the report test; that
  reporter's missing runs are not counted as failed (`ReporterFigures.counted`);
- ``lagging``: the candidate reports less than current by more than
  LAG_MARGIN (over the counted reporters) but the test has not rejected yet:
  hold promotion;
- ``ok``, or ``insufficient`` before any bucket closed with runs in both arms.

A bucket's reports can exceed its assignments (a flush that landed a resolve a
bucket late): its missing count is floored at 0, the same way in both arms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
class ReporterFigures:
    """One reporter's assigned and reported runs per arm (candidate, current), mature buckets."""

    assigned: tuple[int, int]
    reported: tuple[int, int]

    def rate(self, arm: int) -> float | None:
        """Arm 0 (candidate) or 1 (current): reported / assigned, None with none assigned."""
        return self.reported[arm] / self.assigned[arm] if self.assigned[arm] else None

    @property
    def short(self) -> bool:
        """True when this reporter reports under MIN_REPORT_RATE of its own current runs."""
        rate = self.rate(1)
        return rate is not None and rate < MIN_REPORT_RATE

    @property
    def counted(self) -> bool:
        """True when its runs that never reported say something about a config: it reports
        its own current runs (it has some, and is not short)."""
        return self.assigned[1] > 0 and not self.short

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the `reports` section's `by_reporter`."""
        return {"assigned": {"candidate": self.assigned[0], "current": self.assigned[1]},
                "reported": {"candidate": self.reported[0], "current": self.reported[1]},
                "short": self.short, "counted": self.counted}


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
    #: Each reporter's own figures (its assignments against its own reports).
    reporters: Mapping[str, ReporterFigures] = field(default_factory=dict)

    def rate(self, arm: int) -> float | None:
        """Arm 0 (candidate) or 1 (current): reported / assigned, None with none assigned."""
        return self.reported[arm] / self.assigned[arm] if self.assigned[arm] else None

    def short_reporters(self) -> list[str]:
        """The reporters reporting under MIN_REPORT_RATE of their own current runs."""
        return sorted(name for name, f in self.reporters.items() if f.short)

    def reason(self) -> str:
        """One sentence naming both arms' report rates (and the short reporters)."""
        cand, cur = self.rate(0), self.rate(1)
        figures = (f"candidate reported {self.reported[0]} of {self.assigned[0]} assigned runs "
                   f"({_pct(cand)}), current {self.reported[1]} of {self.assigned[1]} "
                   f"({_pct(cur)})")
        if self.verdict == SHORT:
            return (f"report rate: {figures}; evidence e^{self.log_e:.2f} >= "
                    f"e^{self.threshold:.2f} that the candidate's runs go missing more often")
        if self.verdict == BOTH_SHORT:
            named = "; ".join(
                f"{name or '(no token)'} reported {f.reported[1]} of its {f.assigned[1]} "
                f"current runs ({_pct(f.rate(1))})"
                for name, f in ((n, self.reporters[n]) for n in self.short_reporters()))
            return (f"reports missing in both arms: {figures}; {named}, under "
                    f"{MIN_REPORT_RATE:.0%} of its own current runs, so no candidate causes "
                    "this (a reporter gone, or counting runs it does not report?)")
        return f"report rate: {figures}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the gate view's `reports` section."""
        return {"verdict": self.verdict,
                "assigned": {"candidate": self.assigned[0], "current": self.assigned[1]},
                "reported": {"candidate": self.reported[0], "current": self.reported[1]},
                "rate": {"candidate": self.rate(0), "current": self.rate(1)},
                "log_e": round(self.log_e, 4), "threshold": round(self.threshold, 4),
                "alpha": self.alpha, "mature_before": self.before,
                "grace_s": self.grace_s, "reason": self.reason(),
                "by_reporter": {name: f.as_dict() for name, f in sorted(self.reporters.items())}}


#: Per reporter: ((candidate assigned, candidate reported), (current assigned, current
#: reported)), each bucket -> count.
ByReporter = Mapping[str, tuple[tuple[Buckets, Buckets], tuple[Buckets, Buckets]]]


def report_check(candidate: tuple[Buckets, Buckets], current: tuple[Buckets, Buckets],
                 before: int, alpha: float, grace_s: float = REPORT_GRACE_S) -> ReportCheck:
    """Test the candidate's (assigned, reported) buckets against current's, below `before`,
    as one reporter's (`report_check_by`)."""
    return report_check_by({"": (candidate, current)}, before, alpha, grace_s)


def report_check_by(by: ByReporter, before: int, alpha: float,
                    grace_s: float = REPORT_GRACE_S) -> ReportCheck:
    """Test the candidate's report rate against current's, each reporter's assignments set
    against its own reports, below bucket `before`.

    A cell per (bucket, reporter): a reporter that counts assignments in one arm only,
    or never reports (every run of its cell missing), adds no evidence either way. The
    verdict reads the test first: `short` whatever else holds; then `both_short` (a
    reporter under MIN_REPORT_RATE of its own current runs: hold, never hide the test);
    then `lagging` over the reporters whose missing runs count (`ReporterFigures.counted`).
    `alpha` is the test's own level (REPORTS_SHARE of the stage alpha); `grace_s` the grace
    `before` was taken with (shown).
    """
    cells, figures = _cells(by, before)
    test = concurrent_test(cells, alpha)
    total = tuple(sum(f.assigned[arm] for f in figures.values()) for arm in (0, 1))
    got = tuple(sum(f.reported[arm] for f in figures.values()) for arm in (0, 1))
    counted = [f for f in figures.values() if f.counted]
    lag = ReporterFigures((sum(f.assigned[0] for f in counted), sum(f.assigned[1] for f in counted)),
                          (sum(f.reported[0] for f in counted), sum(f.reported[1] for f in counted)))
    cand_rate, cur_rate = lag.rate(0), lag.rate(1)
    if not total[0] or not total[1]:
        verdict = INSUFFICIENT
    elif test.reject:
        verdict = SHORT
    elif any(f.short for f in figures.values()):
        verdict = BOTH_SHORT
    elif cand_rate is not None and cur_rate is not None and cand_rate < cur_rate - LAG_MARGIN:
        verdict = LAGGING
    else:
        verdict = OK
    return ReportCheck(verdict, (total[0], total[1]), (got[0], got[1]), test.log_e,
                       test.threshold, alpha, before, grace_s, figures)


def reporter_figures(by: ByReporter, before: int) -> dict[str, ReporterFigures]:
    """Each reporter's own assigned and reported runs per arm over the buckets below `before`
    (`_cells`' figures, without building the cells)."""
    figures: dict[str, ReporterFigures] = {}
    for name, arms in by.items():
        assigned = [0, 0]
        reported = [0, 0]
        for arm, (given, arrived) in enumerate(arms):
            for bucket, n in given.items():
                if bucket < before:
                    assigned[arm] += int(n)
                    reported[arm] += min(int(n), int(arrived.get(bucket, 0)))
        if assigned[0] or assigned[1]:
            figures[name] = ReporterFigures((assigned[0], assigned[1]),
                                            (reported[0], reported[1]))
    return figures


def _cells(by: ByReporter, before: int) -> tuple[list[Cell], dict[str, ReporterFigures]]:
    """The report test's cells, one per (bucket, reporter), and each reporter's figures."""
    cells = []
    figures: dict[str, ReporterFigures] = {}
    for name, (candidate, current) in sorted(by.items()):
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
            cells.append(Cell(counts[0], counts[1], counts[2], counts[3], bucket, name))
        if assigned[0] or assigned[1]:
            figures[name] = ReporterFigures((assigned[0], assigned[1]),
                                            (reported[0], reported[1]))
    return cells, figures


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1%}"
