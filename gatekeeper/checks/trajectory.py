"""Trajectory changes between two runs of the same job: which tools, in what order.

Pure functions over tool-name sequences. A histogram of change classes
says far more in review than one similarity score: "12 cases lost the
verify_identity call" is a policy problem whatever the pass rate says.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Sequence


class Change(str, enum.Enum):
    """How a candidate's tool sequence differs from the baseline's for one job."""

    SAME = "SAME"
    EXTRA_CALL = "EXTRA_CALL"
    MISSING_CALL = "MISSING_CALL"
    DIFFERENT_TOOL = "DIFFERENT_TOOL"
    REORDERED = "REORDERED"


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two tool-name sequences (insert, delete, substitute)."""
    # One rolling row: trajectories are short, but there is no reason to keep the matrix.
    previous = list(range(len(b) + 1))
    for i, left in enumerate(a, start=1):
        row = [i] + [0] * len(b)
        for j, right in enumerate(b, start=1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1,
                         previous[j - 1] + (0 if left == right else 1))
        previous = row
    return previous[len(b)]


def classify(base: Sequence[str], cand: Sequence[str]) -> Change:
    """Classify how `cand` changed from `base` (SAME, REORDERED, EXTRA_CALL, MISSING_CALL, else
    DIFFERENT_TOOL, tested in that order)."""
    base, cand = list(base), list(cand)
    if base == cand:
        return Change.SAME
    if sorted(base) == sorted(cand):
        # Same calls with the same counts, only the order moved.
        return Change.REORDERED
    distance = edit_distance(base, cand)
    if len(cand) > len(base) and distance == len(cand) - len(base):
        return Change.EXTRA_CALL
    if len(base) > len(cand) and distance == len(base) - len(cand):
        return Change.MISSING_CALL
    return Change.DIFFERENT_TOOL


def lost_tools(base: Sequence[str], cand: Sequence[str],
               watched: Iterable[str] | None = None) -> list[str]:
    """Tools the baseline called that the candidate never called (limited to `watched`)."""
    gone = set(base) - set(cand)
    if watched is not None:
        gone &= set(watched)
    return sorted(gone)


def histogram(changes: Iterable[Change]) -> dict[str, int]:
    """Count each change class; every class is present, zero when unseen."""
    counts = Counter(changes)
    return {change.value: counts.get(change, 0) for change in Change}


def merge_histograms(*histograms: dict[str, int]) -> dict[str, int]:
    """Add histograms class by class (e.g. one per scenario into a suite total)."""
    total = {change.value: 0 for change in Change}
    for one in histograms:
        for name, count in one.items():
            total[name] = total.get(name, 0) + count
    return total
