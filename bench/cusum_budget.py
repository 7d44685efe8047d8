"""The candidate's three CUSUMs against the CUSUM share, with tool errors in the traces.

    .venv/bin/python -m bench.cusum_budget [--stages 1000] [--alpha 0.2] [--seed 23]

A healthy candidate's runs (identical to current's: run failures at 0.10, tool
errors at 0.06 of which two in three also fail the run, forbidden calls at
0.01) are fed, CUSUM_HORIZON_RUNS to a stage, through one detector per metric
(`drift.METRICS`), each with the p0 the gate view gives it (`drift.params_for`,
a fixed baseline at the true rate) and the h derived from the stage alpha.
Any one alarm rolls the candidate back, so a stage's false alarm is "any
detector alarmed". It counts those stages twice in one run: with the h each
detector got before this change (the whole CUSUM share each, ARL0 = horizon /
(share * alpha)) and with the split one (a third each), beside the budget
(CUSUM_SHARE * alpha). At the shipped alpha (0.0025) the share is 2.5e-4 per
stage, too rare to count in a bench, so the bench runs at a larger alpha
(`--alpha`, 0.2 by default: a 0.02 share) where the same derivation applies.
"""

from __future__ import annotations

import argparse
import math
import random

from bindings.models import DriftPolicy
from gatekeeper.stats.budget import CUSUM_HORIZON_RUNS, CUSUM_SHARE, cusum_arl0
from gatekeeper.stats.cusum_arl import h_for_arl
from gatekeeper.stats.drift import FORBIDDEN_CALL, MAX_P1, RUN_FAILURE, TOOL_ERROR

RATES = {RUN_FAILURE: 0.10, TOOL_ERROR: 0.06, FORBIDDEN_CALL: 0.01}
#: Of the runs with a tool error, the share that also fail (the rest recover).
ERROR_FAILS = 2 / 3


def _run(rng: random.Random) -> tuple[bool, bool, bool]:
    """(failed, tool error, forbidden call) of one healthy run, tool errors failing most."""
    error = rng.random() < RATES[TOOL_ERROR]
    # The failure rate stays 0.10 overall: errors fail 2 in 3, the others make up the rest.
    other = (RATES[RUN_FAILURE] - RATES[TOOL_ERROR] * ERROR_FAILS) / (1 - RATES[TOOL_ERROR])
    failed = rng.random() < ERROR_FAILS if error else rng.random() < other
    return failed, error, rng.random() < RATES[FORBIDDEN_CALL]


def _hs(alpha: float, detectors: int) -> dict[str, float]:
    shift = DriftPolicy().shift
    return {m: h_for_arl(p0, min(MAX_P1, p0 + shift), cusum_arl0(alpha, detectors))
            for m, p0 in RATES.items()}


def _stage(rng: random.Random, hs: dict[str, float]) -> set[str]:
    """The metrics whose detector alarmed over one stage of healthy runs."""
    shift = DriftPolicy().shift
    ks = [(m, (RATES[m] + min(MAX_P1, RATES[m] + shift)) / 2.0, hs[m]) for m in RATES]
    sums = [0.0, 0.0, 0.0]
    alarmed: set[str] = set()
    for _ in range(CUSUM_HORIZON_RUNS):
        events = _run(rng)
        for i, (metric, k, h) in enumerate(ks):
            s = max(0.0, sums[i] + (1.0 if events[i] else 0.0) - k)
            if s > h + 1e-9:
                alarmed.add(metric)
                s = 0.0
            sums[i] = s
    return alarmed


def _wilson_upper(hits: int, n: int, z: float = 1.96) -> float:
    p = hits / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre + margin) / (1 + z * z / n)


def main() -> None:
    """Count stages with a false alarm, before (whole share each) and after (split)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=1000)
    parser.add_argument("--alpha", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=23)
    args = parser.parse_args()
    budget = CUSUM_SHARE * args.alpha
    print(f"healthy stages of {CUSUM_HORIZON_RUNS} runs, rates {RATES}, tool errors failing "
          f"{ERROR_FAILS:.2f} of their runs; alpha {args.alpha:g}, CUSUM budget {budget:.4f}")
    results = {}
    for label, detectors in (("before: whole share each", 1), ("after: share split in 3", 3)):
        hs = _hs(args.alpha, detectors)
        rng = random.Random(args.seed)
        per_metric = dict.fromkeys(RATES, 0)
        any_alarm = 0
        for _ in range(args.stages):
            alarmed = _stage(rng, hs)
            any_alarm += bool(alarmed)
            for metric in alarmed:
                per_metric[metric] += 1
        rate = any_alarm / args.stages
        results[label] = rate
        print(f"{label}: h {', '.join(f'{m} {h:.2f}' for m, h in hs.items())}; stages with a "
              f"false alarm {any_alarm}/{args.stages} = {rate:.4f} (Wilson 95% upper "
              f"{_wilson_upper(any_alarm, args.stages):.4f}); per metric {per_metric}; "
              f"ratio to budget {rate / budget:.2f}")


if __name__ == "__main__":
    main()
