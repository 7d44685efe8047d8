"""Trajectory change classes over tool-name sequences."""

from __future__ import annotations

import pytest

from gatekeeper.checks.trajectory import (
    Change,
    classify,
    edit_distance,
    histogram,
    lost_tools,
    merge_histograms,
)


@pytest.mark.parametrize(("a", "b", "expected"), [
    ([], [], 0),
    (["a"], [], 1),
    ([], ["a", "b"], 2),
    (["a", "b", "c"], ["a", "c"], 1),
    (["a", "b"], ["b", "a"], 2),
    (["search", "read", "write"], ["search", "fetch", "write"], 1),
])
def test_edit_distance(a: list[str], b: list[str], expected: int) -> None:
    """Edit distance counts the fewest inserts, deletes and substitutions."""
    assert edit_distance(a, b) == expected
    assert edit_distance(b, a) == expected


@pytest.mark.parametrize(("base", "cand", "expected"), [
    (["a", "b"], ["a", "b"], Change.SAME),
    ([], [], Change.SAME),
    (["a", "b", "c"], ["c", "a", "b"], Change.REORDERED),
    (["a", "b"], ["a", "x", "b"], Change.EXTRA_CALL),
    (["a", "b"], ["a", "b", "b"], Change.EXTRA_CALL),
    (["verify", "refund"], ["refund"], Change.MISSING_CALL),
    (["a", "b"], ["a", "c"], Change.DIFFERENT_TOOL),
    (["a", "b"], ["c"], Change.DIFFERENT_TOOL),
    (["a", "b"], ["b", "a", "c"], Change.DIFFERENT_TOOL),
])
def test_classify(base: list[str], cand: list[str], expected: Change) -> None:
    """classify() names each of the five change classes."""
    assert classify(base, cand) is expected


def test_lost_tools_limited_to_watched() -> None:
    """lost_tools() lists tools the candidate dropped, optionally only the watched ones."""
    assert lost_tools(["verify", "search", "refund"], ["refund"]) == ["search", "verify"]
    assert lost_tools(["verify", "search", "refund"], ["refund"], ["verify"]) == ["verify"]
    assert lost_tools(["a"], ["a", "b"]) == []


def test_histogram_counts_every_class() -> None:
    """histogram() reports every class, zero when unseen, and merges add up."""
    hist = histogram([Change.SAME, Change.SAME, Change.EXTRA_CALL])
    assert hist == {"SAME": 2, "EXTRA_CALL": 1, "MISSING_CALL": 0, "DIFFERENT_TOOL": 0,
                    "REORDERED": 0}
    merged = merge_histograms(hist, histogram([Change.REORDERED]))
    assert merged["SAME"] == 2 and merged["REORDERED"] == 1
