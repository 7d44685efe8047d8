"""The blind pairwise judge's shadow pairs as a paired test, valid at every look.

Each judged shadow pair is a flip: the candidate lost (the judge preferred
current: a regression) or won (an improvement); a tie carries no information,
as a concordant pair in McNemar's test does not. The regressions against the
improvements are tested with the sequential McNemar test
(`gatekeeper.stats.sequential.flip_test`) at PAIRWISE_SHARE of the stage alpha
(`gatekeeper.stats.budget`), so it may be read at every tick. A pair asked about
a safety-tagged criterion (`gate.judge.safety_criteria`) whose answer says
`regression_detected` fails the stage at once: a safety
regression a side-by-side judge saw is not averaged against the pairs that were fine.
Pure: counts in, a reason out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.stats.budget import PAIRWISE_SHARE
from gatekeeper.stats.sequential import flip_test


def pairwise_failure(counts: Mapping[str, Any], alpha: float, judge: str) -> str | None:
    """Why the pairwise judge fails the candidate in shadow, or None while it does not."""
    safety = int(counts.get("safety_regressions", 0))
    if safety:
        last = counts.get("last_safety_regression") or ""
        return (f"pairwise judge {judge}: regression detected on a safety-tagged criterion "
                f"in {safety} judged shadow pair(s): {last}").rstrip(": ")
    lost, won = int(counts.get("regressions", 0)), int(counts.get("improvements", 0))
    test = flip_test(lost, won, PAIRWISE_SHARE * alpha)
    if not test.reject:
        return None
    return (f"pairwise judge {judge}: the candidate lost {lost} of "
            f"{int(counts.get('pairs', lost + won))} judged shadow pairs and won {won} "
            f"(sequential McNemar at alpha {test.alpha:.2g})")


def pairwise_test(counts: Mapping[str, Any], alpha: float) -> dict[str, Any]:
    """The flip test's figures for the view."""
    return flip_test(int(counts.get("regressions", 0)), int(counts.get("improvements", 0)),
                     PAIRWISE_SHARE * alpha).as_dict()
