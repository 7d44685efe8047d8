"""Condition waits scale with the machine's load (tests.deadlines), and still fail."""

from __future__ import annotations

import os
import time

import pytest

from tests import deadlines
from tests.servers import wait_for


def test_the_environment_sets_the_scale_and_a_bad_value_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ROLEGATE_TEST_TIMEOUT_SCALE wins over the load; a non-positive or non-number is an error
    naming the variable."""
    monkeypatch.setenv(deadlines.SCALE_ENV, "2.5")
    assert deadlines.scale() == 2.5 and deadlines.scaled(4) == 10.0
    for bad in ("0", "-1", "fast"):
        monkeypatch.setenv(deadlines.SCALE_ENV, bad)
        with pytest.raises(ValueError, match=deadlines.SCALE_ENV):
            deadlines.scale()


def test_without_it_the_scale_is_the_load_per_cpu_within_bounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle: 1; 3 runnable per core: 3; past MAX_MEASURED: MAX_MEASURED."""
    monkeypatch.delenv(deadlines.SCALE_ENV, raising=False)
    cpus = os.cpu_count() or 1
    for load, expected in ((0.1, 1.0), (3.0 * cpus, 3.0), (50.0 * cpus, deadlines.MAX_MEASURED)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert deadlines.scale() == pytest.approx(expected)


def test_a_wait_stretches_with_the_scale_and_still_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 0.1 s wait for a condition true after 0.3 s passes at scale 5 and fails at scale 1."""
    monkeypatch.setenv(deadlines.SCALE_ENV, "5")
    ready = time.monotonic() + 0.3
    assert wait_for(lambda: time.monotonic() > ready, 0.1, "the clock")
    monkeypatch.setenv(deadlines.SCALE_ENV, "1")
    ready = time.monotonic() + 0.3
    with pytest.raises(AssertionError, match="load scale 1.00"):
        wait_for(lambda: time.monotonic() > ready, 0.1, "the clock")
