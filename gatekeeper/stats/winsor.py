"""Winsorized means from histograms: a few runaway runs do not swing a cost comparison. Pure.

Each value above the cap (the `WINSOR_Q` = 99th percentile, nearest rank) counts
as the cap. In a comparison the cap is the pooled histogram's (both arms'
runs), as Statsig and GrowthBook cap a metric across the experiment, so both
arms are trimmed at the same value. The raw mean is always shown beside it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gatekeeper.stats.statistics import histogram_percentile

#: The quantile values are capped at.
WINSOR_Q = 0.99
#: The warning line for tokens, as record-and-replay comparisons of two builds draw it:
#: +15% against current.
TOKENS_WARN = 0.15


def capped_mean(counts: dict[float, int], cap: float) -> float | None:
    """The mean of the histogram's values with each one above `cap` counted as `cap`."""
    n = sum(counts.values())
    if n == 0:
        return None
    return sum(min(value, cap) * count for value, count in counts.items()) / n


def raw_mean(counts: dict[float, int]) -> float | None:
    """The plain mean of the histogram's values."""
    n = sum(counts.values())
    return None if n == 0 else sum(value * count for value, count in counts.items()) / n


def winsorized_comparison(candidate: dict[float, int], current: dict[float, int],
                          warn: float | None = None) -> dict[str, Any] | None:
    """Candidate against current: means capped at the pooled WINSOR_Q, raw means beside."""
    if not candidate or not current:
        return None
    pooled: Counter[float] = Counter(candidate)
    pooled.update(current)
    cap = histogram_percentile(dict(pooled), WINSOR_Q)
    mine, theirs = capped_mean(candidate, cap), capped_mean(current, cap)
    change = (mine / theirs - 1.0) if mine is not None and theirs else None
    out: dict[str, Any] = {
        "quantile": WINSOR_Q, "cap": cap,
        "candidate_mean": mine, "current_mean": theirs, "change": change,
        "candidate_raw_mean": raw_mean(candidate), "current_raw_mean": raw_mean(current)}
    if warn is not None:
        out["warning"] = change is not None and change > warn
    return out
