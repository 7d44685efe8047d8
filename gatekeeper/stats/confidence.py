"""Always-valid intervals: a confidence sequence for a pass rate, safe to read at every look.

A fixed-sample 95% interval (Wilson) covers the true rate 95% of the time for
one look at a sample size chosen in advance. An operator who reads the
dashboard every hour and acts the first time an interval looks bad is looking
many times, and the chance that some look misleads grows with each one, as the
gatekeeper's own tests would if they re-read a fixed-sample p-value
(`gatekeeper.stats.sequential`).

The confidence sequence here holds at every n at once: with chance at least
1 - alpha the true rate lies inside *every* interval it ever shows. It is the
beta-binomial mixture (Robbins 1970; Howard, Ramdas, McAuliffe and Sekhon 2021):
for each candidate rate p, the mixture over p' ~ Beta(a, b) of the likelihood
ratio of p' against p is a nonnegative martingale when p is the truth, so by
Ville's inequality it ever reaches 1/alpha with chance at most alpha; the
interval is every p it has not. It is the same guarantee the gate's e-value
tests rest on, so what the page shows and what the gatekeeper does agree.

Its price is width: at n = 100 and a rate near 0.9 it is about 1.6 times as wide
as the Wilson interval, at n = 10,000 about 2 times. The offline suite, which
looks once, keeps the Wilson interval.

Pure: counts in, two numbers out.
"""

from __future__ import annotations

import math

#: The mixture's prior: Beta(1, 1), uniform over the rate.
PRIOR_A = 1.0
PRIOR_B = 1.0
#: What the dashboard and the gate view show: 95% always-valid.
DISPLAY_ALPHA = 0.05
_BISECTIONS = 60


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def log_mixture_ratio(successes: int, n: int, p: float, a: float = PRIOR_A,
                      b: float = PRIOR_B) -> float:
    """ln of the mixture martingale against rate `p` after `successes` of `n`."""
    failures = n - successes
    if p <= 0.0:
        return math.inf if successes else _log_beta(a, b + failures) - _log_beta(a, b)
    if p >= 1.0:
        return math.inf if failures else _log_beta(a + successes, b) - _log_beta(a, b)
    return (_log_beta(a + successes, b + failures) - _log_beta(a, b)
            - successes * math.log(p) - failures * math.log1p(-p))


def confidence_sequence(successes: int, n: int, alpha: float = DISPLAY_ALPHA
                        ) -> tuple[float, float]:
    """The always-valid (1 - alpha) interval for the rate after `successes` of `n`.

    [0, 1] before any run. The set of rates the martingale has not rejected is an
    interval around successes / n (its log is convex in p), found by bisection on each
    side.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be within (0, 1), got {alpha}")
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..{n}, got {successes}")
    bound = math.log(1.0 / alpha)
    centre = successes / n

    def rejected(p: float) -> bool:
        return log_mixture_ratio(successes, n, p) >= bound

    def edge(inside: float, outside: float) -> float:
        for _ in range(_BISECTIONS):
            middle = (inside + outside) / 2
            if rejected(middle):
                outside = middle
            else:
                inside = middle
        return inside

    low = 0.0 if not rejected(0.0) else edge(centre, 0.0)
    high = 1.0 if not rejected(1.0) else edge(centre, 1.0)
    return low, high
