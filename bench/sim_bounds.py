"""Information bounds for detecting a drop from `base` to `q`: what no test can beat.

Wald's bound: a test whose false-rollback rate is at most a needs, on average,
at least ln(1/a) / I runs, I the expected log-likelihood ratio (nats) one run
brings. Which I depends on what the test sees:

- `one_sample_bound`: the candidate's runs against a *known* p0, I = KL(q || base);
- `two_sample_bound`: against current's runs at a candidate share s of the
  traffic, the rates unknown: I = KL(f_c || f) + (1 - s)/s KL(f_k || f), f the pooled
  rate (per candidate run);
- `paired_information`: shadow's flips, per pair (the simulator's rho model):
  P(discordant) KL(theta || 1/2), theta the chance a flip is pass -> fail;
- `schedule_bound`: the rollout's actual allocation, run by run: shadow's pairs for
  its duration, then each canary step at its share, then full at 1 - holdback,
  each for its duration at `rate` jobs a second. The fewest candidate runs at
  which the information so far reaches ln(1/a), or None when the whole
  rollout's is below it ("beyond the rollout"); `total` says how much there is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: The rollout's false-rollback budget the bounds are taken at (alpha 0.0025 x 4 stages).
ROLLOUT_ALPHA = 0.01


def kl(q: float, p: float) -> float:
    """KL(Bernoulli(q) || Bernoulli(p)), nats (0 log 0 = 0)."""
    out = 0.0
    if q > 0.0:
        out += q * math.log(q / p)
    if q < 1.0:
        out += (1 - q) * math.log((1 - q) / (1 - p))
    return out


def one_sample_bound(base: float, q: float, alpha: float = ROLLOUT_ALPHA) -> float:
    """ln(1/alpha) / KL(q || base): runs against a known p0."""
    return math.log(1.0 / alpha) / kl(q, base)


def two_sample_information(base: float, q: float, share: float) -> float:
    """Nats per candidate run against current's runs of the same minutes at `share`."""
    fc, fk = 1.0 - q, 1.0 - base
    pooled = share * fc + (1.0 - share) * fk
    return kl(fc, pooled) + (1.0 - share) / share * kl(fk, pooled)


def two_sample_bound(base: float, q: float, share: float = 0.1,
                     alpha: float = ROLLOUT_ALPHA) -> float:
    """ln(1/alpha) over the two-sample information per candidate run at `share`."""
    return math.log(1.0 / alpha) / two_sample_information(base, q, share)


def paired_information(base: float, q: float, rho: float = 0.5) -> float:
    """Nats per shadow pair of the flips, the two arms sharing randomness with chance rho."""
    both = rho * rho
    regress = both * max(0.0, base - q) + (1 - both) * base * (1 - q)
    improve = both * max(0.0, q - base) + (1 - both) * q * (1 - base)
    discordant = regress + improve
    return discordant * kl(regress / discordant, 0.5)


def paired_bound(base: float, q: float, rho: float = 0.5, alpha: float = ROLLOUT_ALPHA) -> float:
    """ln(1/alpha) over the flips' information per pair."""
    return math.log(1.0 / alpha) / paired_information(base, q, rho)


@dataclass(frozen=True)
class Segment:
    """A stretch of the rollout: its candidate runs and the nats each brings."""

    runs: float
    nats_per_run: float


@dataclass(frozen=True)
class ScheduleBound:
    """Where the schedule's information reaches ln(1/alpha), and how much it holds."""

    runs: float | None
    total: float
    needed: float


def schedule(base: float, q: float, durations: Sequence[float], shares: Sequence[float],
             rho: float = 0.5, rate: float = 1.0) -> list[Segment]:
    """The rollout's segments: shadow (every job a pair) for durations[0], then the live
    stages at `shares` (canary steps, full's 1 - holdback) for the durations after it."""
    out = [Segment(durations[0] * rate, paired_information(base, q, rho))]
    for share, seconds in zip(shares, durations[1:]):
        out.append(Segment(seconds * rate * share, two_sample_information(base, q, share)))
    return out


def schedule_bound(segments: Sequence[Segment], alpha: float = ROLLOUT_ALPHA) -> ScheduleBound:
    """The fewest candidate runs whose expected information reaches ln(1/alpha)."""
    needed = math.log(1.0 / alpha)
    runs = total = 0.0
    found: float | None = None
    for segment in segments:
        gain = segment.runs * segment.nats_per_run
        if found is None and total + gain >= needed:
            found = runs + (needed - total) / segment.nats_per_run
        total += gain
        runs += segment.runs
    return ScheduleBound(found, total, needed)
