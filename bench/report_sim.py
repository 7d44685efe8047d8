"""The report-rate test (`gatekeeper.stats.reports`) simulated over whole rollouts.

    python -m bench.report_sim [--rollouts 2000] [--regressed 300] [--seed 1]

Traffic: `rate` jobs a second over the shipped ladder (shadow, canary 0.1,
canary 0.5, full), each stage `STAGE_BUCKETS` closed 30 s buckets (full bakes
for its 7200 s). Each assigned run reports with chance `base` in current's arm
and `base` (healthy) or `base - drop` (regressed) in the candidate's. The test
is read at every closed bucket (it is valid at every look), each stage at the
shipped `reports` share of the stage alpha, afresh per stage as the view runs
it. Healthy: the share of rollouts ever rolled back by the report test (a 95%
Wilson upper bound beside it) against the 1% budget. Regressed: the median
candidate runs assigned before the rollback.
"""

from __future__ import annotations

import argparse
import math
import random

from gatekeeper.stats.budget import REPORTS_SHARE
from gatekeeper.stats.concurrent import RISK_WEIGHTS, Cell, cell_logs
from gatekeeper.stats.reports import MIN_REPORT_RATE

ALPHA = 0.0025
#: (stage, candidate share, closed buckets it lasts): 900 s stages, a 7200 s bake.
LADDER = (("shadow", None, 30), ("canary 0.1", 0.1, 30), ("canary 0.5", 0.5, 30),
          ("full", 0.95, 240))
Z_95 = 1.959963984540054


def _binomial(rng: random.Random, n: int, p: float) -> int:
    return sum(1 for _ in range(n) if rng.random() < p)


def rollout(rng: random.Random, rate: float, base: float, cand: float) -> tuple[bool, int]:
    """(rolled back by the report test, candidate runs assigned by then)."""
    threshold = math.log(1.0 / (REPORTS_SHARE * ALPHA))
    runs = 0
    for _stage, share, buckets in LADDER:
        logs = [0.0] * len(RISK_WEIGHTS)
        cand_n_total = cur_n_total = cand_rep = cur_rep = 0
        for _ in range(buckets):
            jobs = _binomial(rng, int(rate * 30 * 2), 0.5)
            cand_n = jobs if share is None else _binomial(rng, jobs, share)
            cur_n = jobs if share is None else jobs - cand_n
            got_c, got_k = _binomial(rng, cand_n, cand), _binomial(rng, cur_n, base)
            runs += cand_n
            cand_n_total, cur_n_total = cand_n_total + cand_n, cur_n_total + cur_n
            cand_rep, cur_rep = cand_rep + got_c, cur_rep + got_k
            cell = Cell(cand_n, cand_n - got_c, cur_n, cur_n - got_k)
            logs = [a + b for a, b in zip(logs, cell_logs(cell))]
            top = max(math.log(w) + x for w, x in zip(RISK_WEIGHTS, logs))
            log_e = top + math.log(sum(math.exp(math.log(w) + x - top)
                                       for w, x in zip(RISK_WEIGHTS, logs)))
            both_short = cur_n_total and cur_rep / cur_n_total < MIN_REPORT_RATE
            if log_e >= threshold and not both_short:
                return True, runs
    return False, runs


def wilson_upper(k: int, n: int) -> float:
    """The 95% Wilson upper bound of k/n."""
    p = k / n
    centre = p + Z_95 ** 2 / (2 * n)
    spread = Z_95 * math.sqrt(p * (1 - p) / n + Z_95 ** 2 / (4 * n * n))
    return (centre + spread) / (1 + Z_95 ** 2 / n)


def main(argv: list[str] | None = None) -> None:
    """Print the false-rollback and detection tables."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--regressed", type=int, default=300)
    parser.add_argument("--rate", type=float, default=1.0, help="jobs a second")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    print(f"report-rate test: {args.rate:g} jobs/s, read at every closed 30 s bucket, "
          f"share {REPORTS_SHARE} of alpha {ALPHA} per stage, ladder "
          + " -> ".join(stage for stage, _, _ in LADDER))
    print(f"{'base':<6}{'healthy false rollbacks':>26}{'(95% upper)':>13}{'budget':>8}")
    for base in (1.0, 0.99, 0.97):
        false = sum(rollout(rng, args.rate, base, base)[0] for _ in range(args.rollouts))
        print(f"{base:<6.2f}{f'{false}/{args.rollouts}':>26}"
              f"{wilson_upper(false, args.rollouts):>13.2%}{'1%':>8}")
    print(f"{'base':<6}{'missing':>8}{'caught':>8}{'median candidate runs to rollback':>36}")
    for base, drop in ((1.0, 0.3), (1.0, 0.1), (0.99, 0.05)):
        found = [rollout(rng, args.rate, base, base - drop) for _ in range(args.regressed)]
        caught = sorted(runs for hit, runs in found if hit)
        median = caught[len(caught) // 2] if caught else float("nan")
        print(f"{base:<6.2f}{drop:>8.0%}{len(caught) / len(found):>8.0%}{median:>36}")


if __name__ == "__main__":
    main()
