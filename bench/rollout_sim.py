"""Rollout simulator: the shipped gate at several base rates, beside seed 000's plain policy.

    python -m bench.rollout_sim [--rollouts 1000] [--regressed 200] [--seed 1] [--quick]

Every rollout goes through `bench.sim_core.rollout`: at each gatekeeper read the
gate view is built by the view's own functions (p0 from current's stage runs and
its carried history, at its upper bound; the CUSUM's h derived for that p0; the
paired report; the arms' verdicts), `decide()` judges it, `stages.apply` moves
the binding. Policies: GatePolicy() as shipped (alpha 0.0025 per stage,
min_samples 50, min_stage_seconds 900, bake_seconds 7200, h derived), with
min_pass_rate the default 0.9 where the base rate clears it and base - 0.10
below (a floor a role whose current passes 0.5 could keep). "no hold" sets
min_stage_seconds and bake_seconds to 0. Traffic: --rate jobs a second, one
gatekeeper read every --interval seconds; the healthy rollouts, which run to
the end of every stage, are read every --healthy-interval seconds, or
--hold-interval with the hold, to keep the run to minutes (the sequential tests
are valid at any read schedule and a CUSUM alarm is kept once raised, so reading
less often can only lower false rollbacks, by evidence that crossed and fell
back between reads; the Ville bound holds for reads at every tick).

Tables: healthy candidates (p = base): false rollbacks with a 95% Wilson upper
bound, with and without the hold. Regressed candidates (base - drop, shipped
hold): median candidate RUNS (shadow included) before the rollback, a missed
one counting as never; beside it the same gate with each stage's evidence
starting afresh at the stage alpha (the view without its `rollout` section:
the gate before evidence was carried across stages), seed 000's plain policy
(last 5 runs under min_pass_rate) and the information bound
ln(1/alpha)/KL(q || p), the fewest runs any test with false-rollback rate alpha
can average, at alpha 1% and at our own false-rollback rate. Last, the
report-rate test's table (`bench.report_sim`): its false rollbacks over healthy
rollouts against the 1% budget, and the candidate runs it needs to catch 30%,
10% and 5% of runs never reporting.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import time
from dataclasses import dataclass

from bench import report_sim
from bench.sim_core import Outcome, Rule, World, plain_rule, rollout
from bindings.models import GatePolicy, Thresholds

BASES = (0.50, 0.80, 0.95, 0.99)
DROPS = (0.05, 0.10, 0.20)
SEED_WINDOW = 5
BUDGET = 0.01
NEVER = math.inf
Z_95 = 1.959963984540054


def floor_for(base: float) -> float:
    """The min_pass_rate a role with this base rate keeps: 0.9, or base - 0.10 below it."""
    default = Thresholds().min_pass_rate
    return default if round(base - 0.05, 2) >= default else round(base - 0.10, 2)


def policy_for(base: float, *, hold: bool) -> GatePolicy:
    """The shipped GatePolicy, its floor set for the base rate, with or without the hold."""
    shipped = Thresholds()
    thresholds = shipped.model_copy(update={"min_pass_rate": floor_for(base)})
    if not hold:
        thresholds = thresholds.model_copy(update={"min_stage_seconds": 0.0,
                                                   "bake_seconds": 0.0})
    return GatePolicy(thresholds=thresholds)


def kl(q: float, p: float) -> float:
    """KL(Bernoulli(q) || Bernoulli(p)), nats."""
    return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))


def information_bound(base: float, q: float, alpha: float = BUDGET) -> float:
    """ln(1/alpha) / KL(q || base): the fewest runs a test at false-rollback rate alpha needs."""
    return math.log(1.0 / alpha) / kl(q, base)


def wilson_upper(k: int, n: int, z: float = Z_95) -> float:
    """The upper end of the 95% Wilson interval of k out of n."""
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    return min(1.0, centre + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom)


def median(values: list[float]) -> float:
    """The lower median (a missed rollback is `NEVER`)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


@dataclass(frozen=True)
class Healthy:
    """False rollbacks of a healthy candidate over `n` rollouts."""

    back: int
    n: int

    @property
    def rate(self) -> float:
        """The observed false-rollback rate."""
        return self.back / self.n


def batch(world: World, p: float, count: int, seed: int, rule: Rule | None = None,
          literal: bool = False) -> list[Outcome]:
    """`count` rollouts, rollout i seeded with (seed, base, p, i): every policy sees the same jobs."""
    return [rollout(world, p, random.Random(f"{seed}:{world.base}:{p}:{i}"), rule, literal)
            for i in range(count)]


def runs_to_rollback(outcomes: list[Outcome]) -> float:
    """Median candidate runs before the rollback; a candidate never rolled back is NEVER."""
    return median([float(o.runs) if o.rolled_back else NEVER for o in outcomes])


def _n(value: float) -> str:
    return "never" if value == NEVER else f"{value:.0f}"


def main(argv: list[str] | None = None) -> None:
    """Run every table and print it."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000, help="healthy rollouts per cell")
    parser.add_argument("--regressed", type=int, default=200, help="rollouts per drop")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=1.0, help="jobs a second")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between reads")
    parser.add_argument("--healthy-interval", type=float, default=30.0,
                        help="seconds between reads for the healthy rollouts without the hold")
    parser.add_argument("--hold-interval", type=float, default=300.0,
                        help="seconds between reads for the healthy rollouts with the hold")
    parser.add_argument("--quick", action="store_true",
                        help="100 healthy and 40 regressed rollouts per cell")
    args = parser.parse_args(argv)
    if args.quick:
        args.rollouts, args.regressed = min(args.rollouts, 100), min(args.regressed, 40)
    started = time.perf_counter()
    shipped = Thresholds()
    print(f"rollout simulator, seed {args.seed}: {args.rate:g} jobs/s, a read every "
          f"{args.interval:g}s (healthy rollouts: every {args.healthy_interval:g}s, with the "
          f"hold every {args.hold_interval:g}s)")
    print(f"shipped: alpha {shipped.alpha:g} per stage, min_samples {shipped.min_samples}, "
          f"min_stage_seconds {shipped.min_stage_seconds:g}, bake_seconds "
          f"{shipped.bake_seconds:g}, CUSUM h derived, p0 from current's carried history")
    print()
    print(f"healthy candidate (p = base), {args.rollouts} rollouts per cell: false rollbacks "
          "(95% Wilson upper bound); target <= 1% (upper <= 1.5%)")
    print(f"{'base':<6}{'floor':>6}  {'with hold':>22}  {'no hold':>22}")
    healthy: dict[float, Healthy] = {}
    for base in BASES:
        cells = []
        for hold in (True, False):
            interval = args.hold_interval if hold else args.healthy_interval
            world = World(base=base, policy=policy_for(base, hold=hold), rate=args.rate,
                          interval=interval)
            outcomes = batch(world, base, args.rollouts, args.seed)
            cell = Healthy(sum(o.rolled_back for o in outcomes), len(outcomes))
            cells.append(cell)
        healthy[base] = cells[0]
        print(f"{base:<6.2f}{floor_for(base):>6.2f}  " + "  ".join(
            f"{c.rate:>8.2%} (<= {wilson_upper(c.back, c.n):>6.2%})      " for c in cells))
    print()
    print(f"regressed candidates (base - drop, shipped hold), {args.regressed} rollouts each: "
          "median candidate runs before the rollback")
    print("bound@ours: the bound at our own false-rollback rate (its 95% Wilson upper "
          "bound, with the hold, at that base)")
    print("per stage: the same gate with each stage's tests starting afresh (no carried evidence)")
    print(f"{'base':<6}{'drop':>5} {'q':>5} {'caught':>7} {'ours':>6} {'per stage':>10} "
          f"{'plain W=5':>10} {'bound@1%':>9} {'ours/b@1%':>10} {'bound@ours':>11} "
          f"{'ours/b@ours':>12}")
    for base in BASES:
        world = World(base=base, policy=policy_for(base, hold=True), rate=args.rate,
                      interval=args.interval)
        for drop in DROPS:
            q = round(base - drop, 2)
            ours = batch(world, q, args.regressed, args.seed)
            plain = batch(world, q, args.regressed, args.seed, plain_rule(SEED_WINDOW))
            staged = batch(dataclasses.replace(world, carry=False), q, args.regressed, args.seed)
            bound = information_bound(base, q)
            own = healthy[base]
            same = information_bound(base, q, wilson_upper(own.back, own.n))
            mine = runs_to_rollback(ours)
            caught = sum(o.rolled_back for o in ours) / len(ours)
            ratio = "n/a" if mine == NEVER else f"{mine / bound:.2f}"
            ratio_same = "n/a" if mine == NEVER else f"{mine / same:.2f}"
            print(f"{base:<6.2f}{drop:>5.2f} {q:>5.2f} {caught:>7.1%} {_n(mine):>6} "
                  f"{_n(runs_to_rollback(staged)):>10} "
                  f"{_n(runs_to_rollback(plain)):>10} {bound:>9.0f} {ratio:>10} "
                  f"{same:>11.0f} {ratio_same:>12}")
    print()
    half = World(base=0.95, policy=policy_for(0.95, hold=True), rate=args.rate,
                 interval=args.interval)
    at_half = [o.runs for o in batch(half, 0.5, args.regressed, args.seed)]
    print(f"candidate at pass rate 0.5 from base 0.95: rolled back within "
          f"{max(at_half)} candidate runs (worst of {len(at_half)}), median "
          f"{median([float(r) for r in at_half]):.0f}")
    print()
    # Runs that never arrive: the report-rate test's own table (bench.report_sim).
    report_sim.main(["--rollouts", str(args.rollouts), "--regressed", str(args.regressed),
                     "--seed", str(args.seed), "--rate", str(args.rate)])
    print(f"({time.perf_counter() - started:.1f}s)")


#: The pieces tests drive directly.
__all__ = ["batch", "floor_for", "information_bound", "main", "policy_for",
           "runs_to_rollback", "wilson_upper"]

if __name__ == "__main__":
    main()
