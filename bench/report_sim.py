"""The report-rate test (`gatekeeper.stats.reports`) over whole simulated rollouts.

    python -m bench.report_sim [--rollouts 1000] [--regressed 200] [--seed 1] [--jobs 2]
                               [--healthy-rates 1.0,0.99,0.97] [--regressed-rates 0.7,0.9,0.95]

Every rollout goes through `bench.sim_core.rollout`, read after every run: each
assigned run reports with chance `rate` in current's arm and the candidate's
(healthy) or a lower one (regressed); a run that never reports leaves only its
assignment. The view's `reports` section is `report_check` over the matured
report buckets (as `gatekeeper.view.reports` builds it), and under the default
`gate.reports.missing_runs: "fail"` the missing runs count as failed runs in
the comparison with concurrent current (`gatekeeper.stats.missing`); decide()
acts on both. Healthy: the share of rollouts rolled back (95% Wilson upper
bound) against the 1% budget. Regressed: the median candidate runs assigned
before the rollback, and which test rolled back.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable, Sequence

from bench.sim_core import Outcome, World
from bench.sim_measure import NEVER, policy_for, runs_to_rollback, wilson_upper
from bench.sim_runner import Batch, Runner

#: (current's report rate, the candidate's) of the healthy rows and the regressed ones.
HEALTHY = (1.0, 0.99, 0.97)
REGRESSED = ((1.0, 0.7), (1.0, 0.9), (1.0, 0.95))
BASE = 0.95


def world(current: float, candidate: float) -> World:
    """Base 0.95 with the shipped policy, runs reporting at these rates."""
    return World(base=BASE, policy=policy_for(BASE, hold=True), reports=(current, candidate))


def by_test(outcomes: Sequence[Outcome]) -> str:
    """Which test rolled back: the report-rate test, or the comparison counting missing runs."""
    found = Counter("report rate" if o.reason.startswith("report rate") else
                    "comparison" if "never reported" in o.reason or "concurrent" in o.reason
                    else "other" for o in outcomes if o.rolled_back)
    return ", ".join(f"{k} {v}" for k, v in found.most_common()) or "-"


def _rates(known: Sequence[float]) -> Callable[[str], tuple[float, ...]]:
    """An argparse type: comma-separated rates, each one of `known` (a row the table has)."""
    def parse(text: str) -> tuple[float, ...]:
        rates = tuple(float(part) for part in text.split(","))
        unknown = [rate for rate in rates if rate not in known]
        if unknown:
            raise argparse.ArgumentTypeError(f"no row has rate {unknown[0]:g}; the rows: "
                                             + ", ".join(f"{rate:g}" for rate in known))
        return rates
    return parse


def main(argv: list[str] | None = None) -> None:
    """Print the false-rollback and detection tables."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--regressed", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--healthy-rates", type=_rates(HEALTHY), default=HEALTHY,
                        help="only these healthy rows (both arms' report rate), comma-separated")
    parser.add_argument("--regressed-rates", type=_rates(tuple(c for _, c in REGRESSED)),
                        default=tuple(c for _, c in REGRESSED),
                        help="only these regressed rows (the candidate's report rate)")
    args = parser.parse_args(argv)
    healthy = [rate for rate in HEALTHY if rate in args.healthy_rates]
    regressed = [(cur, cand) for cur, cand in REGRESSED if cand in args.regressed_rates]
    batches = [Batch(f"reports {rate}", world(rate, rate), BASE, args.rollouts, args.seed)
               for rate in healthy]
    batches += [Batch(f"reports {cur} {cand}", world(cur, cand), BASE, args.regressed,
                      args.seed) for cur, cand in regressed]
    results = Runner(args.jobs).run(batches)
    print("report-rate test, read after every run: 1 job/s, base 0.95, shipped policy "
          "(missing runs counted as failed: the default)")
    print(f"{'rate':<6}{'healthy false rollbacks':>26}{'(95% upper)':>13}{'budget':>8}  by")
    for rate in healthy:
        outcomes = next(results)
        back = sum(o.rolled_back for o in outcomes)
        print(f"{rate:<6.2f}{f'{back}/{len(outcomes)}':>26}"
              f"{wilson_upper(back, len(outcomes)):>13.2%}{'1%':>8}  {by_test(outcomes)}",
              flush=True)
    print(f"{'rate':<6}{'missing':>8}{'caught':>8}{'median candidate runs to rollback':>36}  by")
    for current, candidate in regressed:
        outcomes = next(results)
        caught = sum(o.rolled_back for o in outcomes) / len(outcomes)
        median = runs_to_rollback(outcomes)
        print(f"{current:<6.2f}{current - candidate:>8.0%}{caught:>8.0%}"
              f"{'never' if median == NEVER else f'{median:.0f}':>36}  {by_test(outcomes)}",
              flush=True)


if __name__ == "__main__":
    main()
