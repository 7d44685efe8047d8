"""The stage's one look: the fixed-sample comparisons decide() reads once, at the stage's end.

Read exactly once per stage (on the tick that advances or rolls back), never on
each tick of a hold, at `budget.final_alpha`: the exact McNemar test over
shadow's flips, and the unpaired comparison of the candidate's pass rate with
current's over the cells both arms ran in (`machine.matched`). Pure.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Protocol

from gatekeeper.stats.statistics import difference_interval, mcnemar_exact
from gatekeeper.view_model.paired import PairedView


class Counts(Protocol):
    """The fields of `decide.Evidence` the unpaired look reads."""

    @property
    def n(self) -> int: ...

    @property
    def passes(self) -> int: ...

    @property
    def current_n(self) -> int: ...

    @property
    def current_passes(self) -> int: ...


def mcnemar_worse(paired: PairedView, level: float) -> str | None:
    """A reason when the exact McNemar test, read once at the stage's end, rejects."""
    regressions, improvements = paired.regressions, paired.improvements
    # A report without its McNemar figures (a simulator's): computed from the flips.
    one_sided = paired.mcnemar.one_sided if paired.mcnemar is not None \
        else mcnemar_exact(regressions, improvements)[0]
    if one_sided >= level:
        return None
    return (f"shadow McNemar at the stage's end: {regressions} pass->fail vs {improvements} "
            f"fail->pass, one-sided p {one_sided:.3g} < {level:g}")


def worse_than_current(evidence: Counts, alpha: float) -> str | None:
    """A reason when the candidate's pass rate is below current's at one-sided level alpha."""
    if evidence.n == 0 or evidence.current_n == 0:
        return None
    # -inv_cdf(alpha), not inv_cdf(1 - alpha): 1 - 1e-300 rounds to 1.0, outside its domain.
    z = -NormalDist().inv_cdf(alpha)
    diff, _, high = difference_interval(evidence.passes, evidence.n, evidence.current_passes,
                                        evidence.current_n, z)
    if high >= 0.0:
        return None
    return (f"candidate pass rate {evidence.passes}/{evidence.n} is below current's "
            f"{evidence.current_passes}/{evidence.current_n} (difference {diff:+.3f}, "
            f"one-sided upper bound {high:+.3f} < 0 at alpha {alpha:g})")
