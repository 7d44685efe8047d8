"""Rollout simulator: the shipped gate at several base rates, beside a plain last-5-runs policy.

    python -m bench.rollout_sim [--rollouts 1000] [--regressed 200] [--seed 1] [--jobs 2]
                                [--quick]
    python -m bench.rollout_sim --scenarios [...]   # issue 23's and 24's scenario table

Every rollout goes through `bench.sim_core.rollout`, read after every run:
the gate view built by the view's own functions, `decide()` judging it,
`stages.apply` moving the binding (`bench.sim_view`: decide() is called only
when what it reads changed, which `tests/test_rollout_sim.py` holds to reading
literally after every run). Policies: GatePolicy() as shipped, with
min_pass_rate the default 0.9 where the base rate clears it and base - 0.10
below (a floor a role whose current passes 0.5 could keep). "no hold" sets
min_stage_seconds and bake_seconds to 0 (the power hold still holds).

Tables: healthy candidates (p = base): false rollbacks with a 95% Wilson upper
bound, with and without the hold. Regressed candidates (base - drop, shipped
hold): median candidate RUNS (shadow included) before the rollback, a missed
one counting as never; beside it the same gate with each stage's evidence
starting afresh at the stage alpha (the view without its `rollout` section),
a plain policy (roll back when the last 5 runs pass under min_pass_rate) and the one-sample
information bound ln(1/alpha)/KL(q || p) at alpha 1%. Issue 23's and 24's
scenarios with the two-sample and schedule bounds: `--scenarios` (the same as
`python -m bench.rollout_scenarios`, the rest of the arguments passed on); the
report-rate test alone: `python -m bench.report_sim`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from bench import rollout_scenarios
from bench.sim_core import World, plain_rule
from bench.sim_measure import (
    NEVER,
    Healthy,
    batch,
    floor_for,
    information_bound,
    median,
    policy_for,
    runs_to_rollback,
    wilson_upper,
)
from bench.sim_runner import Batch, Runner
from bindings.models import Thresholds

BASES = (0.50, 0.80, 0.95, 0.99)
DROPS = (0.05, 0.10, 0.20)
SEED_WINDOW = 5


def _n(value: float) -> str:
    return "never" if value == NEVER else f"{value:.0f}"


def main(argv: list[str] | None = None) -> None:
    """Run every table and print it (`--scenarios`: the scenario table instead)."""
    args_in = sys.argv[1:] if argv is None else list(argv)
    if "--scenarios" in args_in:
        rollout_scenarios.main([a for a in args_in if a != "--scenarios"])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000, help="healthy rollouts per cell")
    parser.add_argument("--regressed", type=int, default=200, help="rollouts per drop")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--quick", action="store_true",
                        help="100 healthy and 40 regressed rollouts per cell")
    parser.add_argument("--scenarios", action="store_true",
                        help="issue 23's and 24's scenario table (bench.rollout_scenarios)")
    args = parser.parse_args(args_in)
    if args.quick:
        args.rollouts, args.regressed = min(args.rollouts, 100), min(args.regressed, 40)
    started = time.perf_counter()
    shipped = Thresholds()
    print(f"rollout simulator, seed {args.seed}: 1 job/s, the gatekeeper reads after every run")
    print(f"shipped: alpha {shipped.alpha:g} per stage, min_samples {shipped.min_samples}, "
          f"min_stage_seconds {shipped.min_stage_seconds:g}, bake_seconds "
          f"{shipped.bake_seconds:g}, the power hold on, against concurrent current")
    healthy = [Batch(f"healthy {base} {hold}", World(base=base, policy=policy_for(base, hold=hold)),
                     base, args.rollouts, args.seed) for base in BASES for hold in (True, False)]
    regressed = []
    for base in BASES:
        world = World(base=base, policy=policy_for(base, hold=True))
        for drop in DROPS:
            q = round(base - drop, 2)
            name = f"drop {base} {q}"
            regressed += [Batch(name, world, q, args.regressed, args.seed),
                          Batch(name, dataclasses.replace(world, carry=False), q, args.regressed,
                                args.seed),
                          Batch(name, world, q, args.regressed, args.seed,
                                plain_rule(SEED_WINDOW))]
    half = Batch("half", World(base=0.95, policy=policy_for(0.95, hold=True)), 0.5,
                 args.regressed, args.seed)
    results = Runner(args.jobs).run([*healthy, *regressed, half])
    print()
    print(f"healthy candidate (p = base), {args.rollouts} rollouts per cell: false rollbacks "
          "(95% Wilson upper bound); target <= 1% (upper <= 1.5%)")
    print(f"{'base':<6}{'floor':>6}  {'with hold':>22}  {'no hold':>22}")
    for base in BASES:
        cells = [Healthy(sum(o.rolled_back for o in found), len(found))
                 for found in (next(results), next(results))]
        print(f"{base:<6.2f}{floor_for(base):>6.2f}  " + "  ".join(
            f"{c.rate:>8.2%} (<= {wilson_upper(c.back, c.n):>6.2%})      " for c in cells),
            flush=True)
    print()
    print(f"regressed candidates (base - drop, shipped hold), {args.regressed} rollouts each: "
          "median candidate runs before the rollback")
    print("per stage: the same gate with each stage's tests starting afresh (no carried evidence)")
    print(f"{'base':<6}{'drop':>5} {'q':>5} {'caught':>7} {'ours':>6} {'per stage':>10} "
          f"{'plain W=5':>10} {'bound@1%':>9} {'ours/b@1%':>10}")
    for base in BASES:
        for drop in DROPS:
            q = round(base - drop, 2)
            ours, staged, plain = next(results), next(results), next(results)
            bound = information_bound(base, q)
            mine = runs_to_rollback(ours)
            caught = sum(o.rolled_back for o in ours) / len(ours)
            ratio = "n/a" if mine == NEVER else f"{mine / bound:.2f}"
            print(f"{base:<6.2f}{drop:>5.2f} {q:>5.2f} {caught:>7.1%} {_n(mine):>6} "
                  f"{_n(runs_to_rollback(staged)):>10} {_n(runs_to_rollback(plain)):>10} "
                  f"{bound:>9.0f} {ratio:>10}", flush=True)
    print()
    at_half = [o.runs for o in next(results)]
    print(f"candidate at pass rate 0.5 from base 0.95: rolled back within "
          f"{max(at_half)} candidate runs (worst of {len(at_half)}), median "
          f"{median([float(r) for r in at_half]):.0f}")
    print(f"({time.perf_counter() - started:.1f}s)")


#: The pieces tests drive directly.
__all__ = ["batch", "floor_for", "information_bound", "main", "policy_for",
           "runs_to_rollback", "wilson_upper"]

if __name__ == "__main__":
    main()
