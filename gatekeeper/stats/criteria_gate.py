"""Each criterion gated like the pass rate: per key, candidate against current, valid at every look.

A pass rate that holds while a safety-relevant tool call disappears is a
regression the averaged rate hides, so every deterministic criterion of the config's spec
(and every judged one, `gatekeeper.judges`) gets its own test, per criterion
key, in one of three modes set in the role's `gate.criteria`:

- gated (the default): a sequential test read at every tick, valid however
  often it is read. In shadow, where both arms ran the same jobs, the sequential
  McNemar test over the key's paired flips (current passed and the candidate
  failed, against the reverse); elsewhere the failure-rate test of the
  candidate's failures on the key against current's rate on it, at its upper
  Wilson bound (`sequential.rate_log_ratio`, `upper_p0`). The gated keys share
  `budget.CRITERIA_SHARE` of the stage alpha evenly (`budget.criteria_alpha`),
  so the key whose test rejects is the reason, named;
- blocking: zero tolerance, as a forbidden tool under `max_forbidden_rate` 0:
  the first candidate run that fails the key rolls back, at any n;
- observed: its figures are shown, it never acts (while a team builds trust in
  a criterion, or in a judge).

Pure: counts in, verdicts out; the gate view's `by_criterion.gate` section carries
the counts and decide() recomputes the verdicts from them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.stats.budget import criteria_alpha
from gatekeeper.stats.sequential import log_ratio, rate_log_ratio, upper_p0

GATED, BLOCKING, OBSERVED = "gated", "blocking", "observed"
MODES = (GATED, BLOCKING, OBSERVED)
#: The highest p0 the rate test runs against (it needs p0 < 1).
_MAX_P0 = 0.999


@dataclass(frozen=True)
class KeyCounts:
    """One criterion key on the judged arm and on current, as the gate view counts them."""

    key: str
    #: Candidate (or shadow) runs that passed and failed it (not applicable: neither).
    passed: int = 0
    failed: int = 0
    current_passed: int = 0
    current_failed: int = 0
    #: In shadow, on jobs both arms ran: current passed, the candidate failed (lost),
    #: and the reverse (gained). None: not paired.
    lost: int | None = None
    gained: int | None = None
    #: Where the counts come from ("spec", "judge"); shown, and used in reasons.
    source: str = "spec"
    #: A human reading of the loss ("4 cases lost the verifyIdentity call").
    message: str = ""
    #: Why the key is held at observed whatever the policy says (a judge not yet
    #: trusted on it, `gatekeeper.view.judges.trusted_modes`); "" when it is not.
    held: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the gate view."""
        out: dict[str, Any] = {"key": self.key, "source": self.source,
                               "passed": self.passed, "failed": self.failed,
                               "current_passed": self.current_passed,
                               "current_failed": self.current_failed}
        if self.lost is not None:
            out.update(lost=self.lost, gained=self.gained or 0)
        if self.message:
            out["message"] = self.message
        if self.held:
            out["held"] = self.held
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> KeyCounts:
        """Read counts back from the gate view's JSON (unknown fields ignored)."""
        lost = raw.get("lost")
        return cls(key=str(raw["key"]), passed=int(raw.get("passed", 0)),
                   failed=int(raw.get("failed", 0)),
                   current_passed=int(raw.get("current_passed", 0)),
                   current_failed=int(raw.get("current_failed", 0)),
                   lost=None if lost is None else int(lost),
                   gained=None if lost is None else int(raw.get("gained", 0)),
                   source=str(raw.get("source", "spec")), message=str(raw.get("message", "")),
                   held=str(raw.get("held", "")))


@dataclass(frozen=True)
class KeyVerdict:
    """One key's test: its mode, figures, and whether it rejects (and acts)."""

    counts: KeyCounts
    mode: str
    #: "paired", "rate", "zero_tolerance", or None when there is nothing to test yet.
    test: str | None
    log_e: float
    threshold: float
    alpha: float
    reject: bool

    @property
    def acts(self) -> bool:
        """True when this verdict rolls the candidate back (observed keys never act)."""
        return self.reject and self.mode != OBSERVED

    def reason(self) -> str:
        """The rollback reason, naming the key."""
        c = self.counts
        what = c.message or (f"lost on {c.lost} jobs current passed, gained on {c.gained}"
                             if c.lost is not None else
                             f"failed {c.failed} of {c.passed + c.failed} candidate runs "
                             f"against {c.current_failed} of "
                             f"{c.current_passed + c.current_failed} on current")
        if self.mode == BLOCKING:
            return f"criterion {c.key} (blocking): {what}"
        return (f"criterion {c.key}: {what} (sequential evidence e^{self.log_e:.2f} >= "
                f"e^{self.threshold:.2f}, alpha {self.alpha:.3g})")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the counts, the mode and the test's figures."""
        return {**self.counts.as_dict(), "mode": self.mode, "test": self.test,
                "log_e": round(self.log_e, 4), "threshold": round(self.threshold, 4),
                "alpha": self.alpha, "reject": self.reject, "acts": self.acts}


def mode_of(key: str, modes: Mapping[str, str]) -> str:
    """A key's mode: as the policy names it, else gated."""
    return modes.get(key, GATED)


def _mode(c: KeyCounts, modes: Mapping[str, str]) -> str:
    return OBSERVED if c.held else mode_of(c.key, modes)


def criteria_tests(counts: Iterable[KeyCounts], modes: Mapping[str, str],
                   alpha: float) -> list[KeyVerdict]:
    """Every key's verdict at stage alpha `alpha`, acting ones first, then by key."""
    chosen = sorted(counts, key=lambda c: c.key)
    gated = sum(1 for c in chosen if _mode(c, modes) == GATED)
    level = criteria_alpha(alpha, gated)
    out = [_verdict(c, _mode(c, modes), level) for c in chosen]
    return sorted(out, key=lambda v: (not v.acts, v.counts.key))


def acting(verdicts: Sequence[KeyVerdict]) -> tuple[list[KeyVerdict], list[KeyVerdict]]:
    """(blocking keys that failed, gated keys whose test rejected)."""
    return ([v for v in verdicts if v.acts and v.mode == BLOCKING],
            [v for v in verdicts if v.acts and v.mode == GATED])


def _verdict(c: KeyCounts, mode: str, level: float) -> KeyVerdict:
    threshold = math.log(1.0 / level)
    if mode == BLOCKING:
        # Zero tolerance: one failing candidate run is enough, whatever current did.
        failed = c.failed if c.lost is None else max(c.failed, c.lost)
        return KeyVerdict(c, mode, "zero_tolerance", 0.0, 0.0, 0.0, failed > 0)
    if c.lost is not None:
        # Paired jobs only: one test per key, never the better of two.
        log_e = log_ratio(c.lost, c.gained or 0)
        return KeyVerdict(c, mode, "paired", log_e, threshold, level, log_e >= threshold)
    current_n = c.current_passed + c.current_failed
    n = c.passed + c.failed
    if current_n == 0 or n == 0:
        return KeyVerdict(c, mode, None, 0.0, threshold, level, False)
    p0 = min(_MAX_P0, upper_p0(c.current_failed / current_n, current_n))
    if p0 >= _MAX_P0 or p0 <= 0.0:
        # Current fails it (nearly) always: the candidate cannot be shown worse.
        return KeyVerdict(c, mode, None, 0.0, threshold, level, False)
    log_e = rate_log_ratio(c.failed, n, p0)
    return KeyVerdict(c, mode, "rate", log_e, threshold, level, log_e >= threshold)
