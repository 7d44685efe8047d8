"""Shadow comparison: pair current and candidate runs of the same jobs, then judge the flips.

In shadow both configs run every job, so their runs pair by job key.
Only the discordant pairs carry information: the exact McNemar test asks how
surprising so few favourable flips would be if the change made no difference. A
blocking trajectory change (a required tool lost) fails shadow whatever the
numbers say. Pure: runs in, a report out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.stats.statistics import mcnemar_exact
from gatekeeper.checks.trajectory import Change, classify, histogram, lost_tools

#: Keys listed per category in a report; the counts stay exact beyond it.
MAX_LISTED_KEYS = 50


@dataclass(frozen=True)
class Run:
    """What pairing and drift need from one run: its job key, outcome and signals."""

    key: str
    passed: bool
    tools: tuple[str, ...] = ()
    tool_error: bool = False
    forbidden_call: bool = False


@dataclass(frozen=True)
class Pair:
    """The current and candidate runs of one job."""

    key: str
    current: Run
    candidate: Run


@dataclass(frozen=True)
class PairedReport:
    """Flips, McNemar p-values, trajectory histogram and the shadow verdict."""

    pairs: int
    both_pass: int
    both_fail: int
    regressions: int
    improvements: int
    p_one_sided: float
    p_two_sided: float
    trajectory: dict[str, int]
    regressed_keys: list[str]
    improved_keys: list[str]
    blocking: list[dict[str, Any]]
    verdict: str
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The report as the JSON the gate view shows under "paired"."""
        return {
            "pairs": self.pairs,
            "flips": {"pass_to_fail": self.regressions, "fail_to_pass": self.improvements},
            "agree": {"pass": self.both_pass, "fail": self.both_fail},
            "mcnemar": {"one_sided": self.p_one_sided, "two_sided": self.p_two_sided},
            "trajectory": self.trajectory,
            "regressed_keys": self.regressed_keys,
            "improved_keys": self.improved_keys,
            "blocking": self.blocking,
            "verdict": self.verdict,
            "reasons": self.reasons,
        }


def pair_runs(current: Iterable[Run], candidate: Iterable[Run]) -> list[Pair]:
    """Pair runs by key; a key run several times pairs its runs in order (1st with 1st)."""
    by_key: dict[str, list[Run]] = defaultdict(list)
    for run in current:
        if run.key:
            by_key[run.key].append(run)
    pairs: list[Pair] = []
    taken: dict[str, int] = defaultdict(int)
    for run in candidate:
        mates = by_key.get(run.key)
        if not run.key or not mates or taken[run.key] >= len(mates):
            continue
        pairs.append(Pair(run.key, mates[taken[run.key]], run))
        taken[run.key] += 1
    return pairs


def compare(pairs: Sequence[Pair], *, alpha: float, min_samples: int,
            required_tools: Iterable[str] = ()) -> PairedReport:
    """Judge paired runs: fail on a blocking change or when one-sided p < alpha."""
    required = tuple(required_tools)
    regressed: list[str] = []
    improved: list[str] = []
    both_pass = both_fail = 0
    changes: list[Change] = []
    blocking: list[dict[str, Any]] = []
    for pair in pairs:
        was, now = pair.current.passed, pair.candidate.passed
        if was and not now:
            regressed.append(pair.key)
        elif now and not was:
            improved.append(pair.key)
        elif now:
            both_pass += 1
        else:
            both_fail += 1
        changes.append(classify(pair.current.tools, pair.candidate.tools))
        # A required tool the baseline called and the candidate dropped blocks on its
        # own: "a pass rate that holds while a safety call disappears is a regression".
        gone = lost_tools(pair.current.tools, pair.candidate.tools, required)
        if gone:
            blocking.append({"key": pair.key, "lost": gone})
    one_sided, two_sided = mcnemar_exact(len(regressed), len(improved))
    lost = sorted({tool for item in blocking for tool in item["lost"]})
    verdict, reasons = shadow_verdict(len(pairs), len(regressed), len(improved), one_sided,
                                      len(blocking), lost, alpha=alpha,
                                      min_samples=min_samples)
    return PairedReport(
        pairs=len(pairs), both_pass=both_pass, both_fail=both_fail,
        regressions=len(regressed), improvements=len(improved),
        p_one_sided=one_sided, p_two_sided=two_sided,
        trajectory=histogram(changes),
        regressed_keys=regressed[:MAX_LISTED_KEYS], improved_keys=improved[:MAX_LISTED_KEYS],
        blocking=blocking[:MAX_LISTED_KEYS], verdict=verdict, reasons=reasons,
    )


def shadow_verdict(pairs: int, regressions: int, improvements: int, p_one_sided: float,
                   blocking: int, lost: Sequence[str], *, alpha: float,
                   min_samples: int) -> tuple[str, list[str]]:
    """The shadow verdict and its reasons from the counts: `blocking` pairs lost `lost` tools.

    Counts only, so a one-shot `compare` and the running tally the gate view
    keeps (`gatekeeper.stats.pair_tally`) judge alike.
    """
    reasons: list[str] = []
    if blocking:
        reasons.append(f"{blocking} paired runs lost required tools {sorted(lost)}")
    # One look at the end of the sample, so alpha means what it says.
    if pairs >= min_samples and p_one_sided < alpha:
        reasons.append(f"candidate worse: {regressions} pass->fail vs {improvements} "
                       f"fail->pass, McNemar one-sided p={p_one_sided:.4g} < {alpha:g}")
    if reasons:
        return "fail", reasons
    if pairs < min_samples:
        return "insufficient", [f"{pairs} paired runs, need {min_samples}"]
    return "pass", [f"{pairs} pairs, McNemar one-sided p={p_one_sided:.4g} >= {alpha:g}"]
