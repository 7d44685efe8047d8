"""Shadow pairing: flips, exact McNemar, trajectory histogram and the shadow verdict."""

from __future__ import annotations

import pytest

from gatekeeper.stats.pairing import Pair, Run, compare, pair_runs


def _pairs(regressions: int, improvements: int, agree: int) -> list[Pair]:
    pairs = []
    for i in range(regressions):
        pairs.append(Pair(f"r{i}", Run(f"r{i}", True, ("a",)), Run(f"r{i}", False, ("a",))))
    for i in range(improvements):
        pairs.append(Pair(f"i{i}", Run(f"i{i}", False, ("a",)), Run(f"i{i}", True, ("a",))))
    for i in range(agree):
        pairs.append(Pair(f"s{i}", Run(f"s{i}", True, ("a",)), Run(f"s{i}", True, ("a",))))
    return pairs


def test_seed_worked_example() -> None:
    """14 regressions and 5 improvements give McNemar 0.0318 one-sided, 0.0636 two-sided."""
    report = compare(_pairs(14, 5, 181), alpha=0.05, min_samples=200)
    assert report.pairs == 200
    assert report.regressions == 14 and report.improvements == 5
    assert report.p_one_sided == pytest.approx(16664 / 524288)
    assert round(report.p_one_sided, 4) == 0.0318
    assert round(report.p_two_sided, 4) == 0.0636
    assert report.verdict == "fail"
    assert report.regressed_keys[:2] == ["r0", "r1"] and len(report.regressed_keys) == 14


def test_not_significant_passes() -> None:
    """The same flips pass when alpha is stricter than the p-value."""
    report = compare(_pairs(14, 5, 181), alpha=0.01, min_samples=200)
    assert report.verdict == "pass"


def test_insufficient_below_min_samples() -> None:
    """Fewer pairs than min_samples is insufficient, even with lopsided flips."""
    report = compare(_pairs(9, 0, 10), alpha=0.05, min_samples=50)
    assert report.verdict == "insufficient"
    assert report.p_one_sided == pytest.approx(2 ** -9)


def test_lost_required_tool_blocks() -> None:
    """A required tool dropped by the candidate fails shadow at once, pass rate regardless."""
    pairs = [Pair("k1", Run("k1", True, ("verify", "refund")), Run("k1", True, ("refund",)))]
    report = compare(pairs, alpha=0.05, min_samples=100, required_tools=("verify",))
    assert report.verdict == "fail"
    assert report.blocking == [{"key": "k1", "lost": ["verify"]}]
    assert report.trajectory["MISSING_CALL"] == 1
    assert report.as_dict()["flips"] == {"pass_to_fail": 0, "fail_to_pass": 0}


def test_pair_runs_by_key_in_order() -> None:
    """Runs pair by key, repeated keys pair in order, unmatched or keyless runs are dropped."""
    current = [Run("a", True), Run("b", True), Run("a", False), Run("", True)]
    candidate = [Run("a", False), Run("c", True), Run("a", True), Run("a", True), Run("", False)]
    pairs = pair_runs(current, candidate)
    assert [(p.key, p.current.passed, p.candidate.passed) for p in pairs] == [
        ("a", True, False), ("a", False, True)]
