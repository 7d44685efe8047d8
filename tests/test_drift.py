"""Drift detectors: Bernoulli CUSUM per metric, replayed from the run stream, and calibration."""

from __future__ import annotations

from bindings.models import DriftPolicy
from gatekeeper.stats.drift import (
    FORBIDDEN_CALL,
    RUN_FAILURE,
    TOOL_ERROR,
    alarms_of,
    calibrate,
    drift_view,
    replay,
    watch,
)
from gatekeeper.stats.pairing import Run


def _runs(pattern: str) -> list[Run]:
    """'.' a passing run, 'F' a failure, 'E' a passing run with a tool error, 'X' a forbidden call."""
    return [Run(f"k{i}", passed=c in ".E", tool_error=c == "E", forbidden_call=c == "X")
            for i, c in enumerate(pattern)]


def test_seed_numbers_k_and_reset() -> None:
    """p0 0.02, p1 0.05 gives k 0.035; the sum climbs by 0.965 per event and alarms past h."""
    report = replay(TOOL_ERROR, _runs("EEEEE"), p0=0.02, shift=0.03, h=4.0)
    assert abs(report.as_dict()["k"] - 0.035) < 1e-12
    assert report.alarms == 1 and report.first_alarm_at == 5
    assert report.s == 0.0  # the sum restarts after an alarm


def test_quiet_stream_stays_near_zero() -> None:
    """Runs at the baseline rate never alarm and keep the sum small."""
    report = replay(RUN_FAILURE, _runs(("." * 19 + "F") * 20), p0=0.05, shift=0.05, h=5.0)
    assert not report.alarm and report.s < 1.0 and report.events == 20


def test_replay_is_resumable() -> None:
    """Replaying a longer stream continues where a shorter one left off (no stored state)."""
    stream = _runs("..F.FF..F.FFF")
    short = replay(RUN_FAILURE, stream[:6], p0=0.05, shift=0.1, h=3.0)
    full = replay(RUN_FAILURE, stream, p0=0.05, shift=0.1, h=3.0)
    assert short.alarms == 0 and full.alarms == 1 and full.first_alarm_at is not None
    assert full.first_alarm_at > 6


def test_candidate_p0_from_current_arm() -> None:
    """The candidate's p0 comes from the current arm; a fixed baseline overrides it."""
    current = _runs(("." * 9 + "F") * 10)
    reports = watch(_runs("FFFFFFFF"), current, DriftPolicy(shift=0.05, h=5.0))
    assert reports[RUN_FAILURE].p0 == 0.1 and reports[RUN_FAILURE].alarm
    assert not reports[FORBIDDEN_CALL].alarm
    fixed = watch(_runs("F"), current, DriftPolicy(baseline={RUN_FAILURE: 0.2}))
    assert fixed[RUN_FAILURE].p0 == 0.2


def test_drift_view_flags_both_arms() -> None:
    """The view lists alarms per arm: a drifting current alerts, a bad candidate alarms."""
    current = _runs("." * 100 + "E" * 10)
    view = drift_view(_runs("X" * 10), current, DriftPolicy(shift=0.05, h=3.0))
    assert "forbidden_call" in alarms_of(view, "candidate")
    assert alarms_of(view, "current") == ["tool_error"]
    assert drift_view(None, current, DriftPolicy(enabled=False))["alarms"] == []


def test_calibrate_counts_false_alarms_per_h() -> None:
    """Calibration reports fewer false alarms for larger h on the same known-good runs."""
    good = _runs(("." * 15 + "FF" + "." * 3) * 50)
    rows = calibrate(good, metric=RUN_FAILURE, hs=[1.0, 2.0, 20.0], shift=0.05)
    alarms = [row["false_alarms"] for row in rows]
    assert [row["h"] for row in rows] == [1.0, 2.0, 20.0]
    assert alarms[0] >= alarms[1] >= alarms[2] == 0 and alarms[0] > 0
