"""A sequential McNemar test: may be read after every pair, and alpha still means what it says.

The exact McNemar p-value is a one-look test: re-reading it at every tick and
stopping the first time it dips under alpha raises the false-alarm rate well
above alpha. Here the evidence against "the candidate is no worse" is a
likelihood ratio over the discordant pairs instead. Given a flip, under the
null a pass->fail is at most as likely as a fail->pass (theta <= 1/2); each
alternative theta > 1/2 gives the ratio (2 theta)^r (2 (1 - theta))^i for r
regressions and i improvements. That is a nonnegative supermartingale under
the null, and so is an equal-weight mixture over several thetas, so by Ville's
inequality the chance it EVER reaches 1/alpha, over any number of looks at any
times, is at most alpha. The mixture spares choosing one alternative: a small
regression (theta near 0.6-0.7) and a large one (0.9) both stop about as soon
as the best single-theta test would, at a cost of ln(len(THETAS)) nats.

Pure: counts in, a number out; the counts are what the paired report shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Shares of the discordant pairs that regress, under the alternatives mixed.
THETAS: tuple[float, ...] = (0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class FlipTest:
    """The sequential McNemar figures for one set of flip counts."""

    regressions: int
    improvements: int
    log_ratio: float
    threshold: float
    alpha: float

    @property
    def reject(self) -> bool:
        """True when the evidence reached 1/alpha: the candidate is worse, at level alpha."""
        return self.log_ratio >= self.threshold

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the decision's details."""
        return {"regressions": self.regressions, "improvements": self.improvements,
                "log_likelihood_ratio": round(self.log_ratio, 4),
                "threshold": round(self.threshold, 4), "alpha": self.alpha,
                "reject": self.reject}


def log_ratio(regressions: int, improvements: int,
              thetas: Sequence[float] = THETAS) -> float:
    """ln of the mixture likelihood ratio of "candidate worse" over "no difference"."""
    if regressions < 0 or improvements < 0:
        raise ValueError("flip counts must be non-negative")
    if not thetas or any(not 0.5 < t < 1.0 for t in thetas):
        raise ValueError(f"each theta must be within (0.5, 1), got {list(thetas)}")
    logs = [regressions * math.log(2.0 * t) + improvements * math.log(2.0 * (1.0 - t))
            for t in thetas]
    top = max(logs)
    return top + math.log(sum(math.exp(x - top) for x in logs) / len(logs))


def flip_test(regressions: int, improvements: int, alpha: float) -> FlipTest:
    """Test the flips at level alpha, valid however often it is repeated as pairs arrive."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    return FlipTest(regressions, improvements, log_ratio(regressions, improvements),
                    math.log(1.0 / alpha), alpha)


def flips_of(paired: Mapping[str, Any]) -> tuple[int, int]:
    """(pass->fail, fail->pass) out of a paired report's JSON; (0, 0) when it has none."""
    flips = paired.get("flips") or {}
    return int(flips.get("pass_to_fail", 0)), int(flips.get("fail_to_pass", 0))
