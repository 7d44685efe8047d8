"""Issue 23's scenarios: the gate judged in the situations teams meet, against concurrent current.

    python -m bench.rollout_scenarios [--rollouts 1000] [--regressed 200] [--seed 1]
                                      [--before 0] [--quick]

Every rollout goes through `bench.sim_core.rollout` (the gate view's own
functions, `decide()`, `stages.apply`), the `concurrent` section built by
`gatekeeper.view.concurrent.section_of` from each arm's cell counts. Shipped
policy (`bench.rollout_sim.policy_for`, with the hold), 1 job a second, the
holdback 0.05 in `full`. Healthy rollouts are read every --interval seconds
(30: the concurrent tests change only when a 30 s bucket closes, so this sees
nearly every value they take; the paired flips are valid at any schedule).
--before N also runs N rollouts per healthy scenario through the gate as it
was (`World(concurrent=False)`: p0 from current's history), for contrast.

Tables: false rollbacks per healthy scenario (95% Wilson upper bound); the
worse-in-every-tenant candidate a rule sends the easy tenant (caught before
`full`); detection of each drop (median candidate runs) beside three bounds
ln(1/0.01)/KL: one-sample against a known p0, two-sample at a 0.1 share (the
first canary step), and the paired bound of shadow's flips at rho 0.5.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time

from bench.rollout_sim import (
    BUDGET,
    NEVER,
    batch,
    information_bound,
    kl,
    policy_for,
    runs_to_rollback,
    wilson_upper,
)
from bench.sim_core import Shock, Tenant, World

OUTAGE_S = 300.0


def healthy_scenarios(interval: float) -> list[tuple[str, World, float]]:
    """(name, world, candidate's pass rate) for every healthy scenario."""
    def world(base: float, **extra: object) -> World:
        return World(base=base, policy=policy_for(base, hold=True), interval=interval,
                     **extra)  # type: ignore[arg-type]

    hard = (Tenant(0.7, 0.97, 0.97), Tenant(0.3, 0.75, 0.75))
    out = [("healthy 0.95", world(0.95), 0.95)]
    for stage, after in (("shadow", 300.0), ("canary", 300.0), ("full", 1800.0)):
        out.append((f"outage in {stage} (5 min, both arms)",
                    world(0.95, shock=Shock(stage, after, OUTAGE_S, outage=True)), 0.95))
    out += [
        ("drift 0.95->0.90 mid-canary", world(0.95, shock=Shock("canary", 450.0, drop=0.05)),
         0.95),
        ("drift 0.95->0.90 in full", world(0.95, shock=Shock("full", 0.0, drop=0.05)), 0.95),
        ("rule sends the hard tenant", world(0.91, tenants=hard, rule_tenant=1), 0.91),
        ("new role, no history, 0.9", world(0.9, history=0), 0.9),
        ("new role, no history, 0.5", world(0.5, history=0), 0.5),
        ("base 0.999", world(0.999), 0.999),
        ("base 0.9999", world(0.9999), 0.9999),
        ("tool errors 5%, outage in canary",
         world(0.95, tool_error=0.05, shock=Shock("canary", 300.0, OUTAGE_S, outage=True)),
         0.95),
    ]
    return out


def paired_bound(base: float, q: float, rho: float = 0.5, alpha: float = BUDGET) -> float:
    """ln(1/alpha) over the information per pair of shadow's flips (sim_core's rho model)."""
    # P(current passes, candidate fails) and the reverse, with shared randomness rho.
    both = rho * rho
    regress = both * max(0.0, base - q) + (1 - both) * base * (1 - q)
    improve = both * max(0.0, q - base) + (1 - both) * q * (1 - base)
    discordant = regress + improve
    theta = regress / discordant
    return math.log(1 / alpha) / (discordant * kl(theta, 0.5))


def two_sample_bound(base: float, q: float, share: float = 0.1,
                     alpha: float = BUDGET) -> float:
    """ln(1/alpha) over the two-sample information per candidate run at `share`."""
    fc, fk = 1 - q, 1 - base
    pooled = share * fc + (1 - share) * fk
    return math.log(1 / alpha) / (kl(fc, pooled) + (1 - share) / share * kl(fk, pooled))


def main(argv: list[str] | None = None) -> None:
    """Run every table and print it."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000, help="healthy rollouts per cell")
    parser.add_argument("--regressed", type=int, default=200, help="rollouts per drop")
    parser.add_argument("--before", type=int, default=0,
                        help="rollouts per healthy scenario through the gate before issue 23")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--interval", type=float, default=30.0,
                        help="seconds between reads, healthy rollouts")
    parser.add_argument("--quick", action="store_true", help="100 healthy, 40 regressed")
    args = parser.parse_args(argv)
    if args.quick:
        args.rollouts, args.regressed = min(args.rollouts, 100), min(args.regressed, 40)
    started = time.perf_counter()
    print(f"issue 23 scenarios, seed {args.seed}: 1 job/s, healthy read every "
          f"{args.interval:g}s, regressed every 5s; {args.rollouts} healthy rollouts per row")
    print(f"{'healthy scenario':<36}{'false rollbacks':>16}{'(<= upper)':>12}"
          + (f"{'before #23':>12}" if args.before else ""))
    for name, world, p in healthy_scenarios(args.interval):
        outcomes = batch(world, p, args.rollouts, args.seed)
        back = sum(o.rolled_back for o in outcomes)
        row = f"{name:<36}{back / len(outcomes):>16.2%}{wilson_upper(back, len(outcomes)):>12.2%}"
        if args.before:
            old = batch(dataclasses.replace(world, concurrent=False), p, args.before, args.seed)
            row += f"{sum(o.rolled_back for o in old) / len(old):>12.0%}"
        print(row, flush=True)
    print()
    easy = World(base=0.85, policy=policy_for(0.85, hold=True),
                 tenants=(Tenant(0.5, 0.97, 0.92), Tenant(0.5, 0.80, 0.75)), rule_tenant=0)
    worse = batch(easy, 0.85, args.regressed, args.seed)
    before_full = sum(o.rolled_back and o.stage != "full" for o in worse) / len(worse)
    print(f"worse in every tenant, a rule sends it the easy one: caught before full in "
          f"{before_full:.1%} of {len(worse)}, median {runs_to_rollback(worse):.0f} runs, "
          f"{sum(not o.rolled_back for o in worse)} reached stable")
    print()
    print(f"regressed candidates, {args.regressed} rollouts each: median candidate runs; "
          "bounds ln(1/0.01)/KL")
    print(f"{'base':<8}{'q':>7}{'caught':>8}{'ours':>7}{'1-sample':>9}{'ours/1s':>8}"
          f"{'2-sample@0.1':>13}{'ours/2s':>8}{'paired':>8}{'ours/pd':>8}")
    cells = [(b, round(b - d, 2)) for b in (0.50, 0.80, 0.95, 0.99) for d in (0.05, 0.10, 0.20)]
    cells += [(0.999, 0.99), (0.9999, 0.999)]
    for base, q in cells:
        world = World(base=base, policy=policy_for(base, hold=True), interval=5.0)
        outcomes = batch(world, q, args.regressed, args.seed)
        mine = runs_to_rollback(outcomes)
        caught = sum(o.rolled_back for o in outcomes) / len(outcomes)
        one, two, pair = (information_bound(base, q), two_sample_bound(base, q),
                          paired_bound(base, q))
        show = "never" if mine == NEVER else f"{mine:.0f}"

        def ratio(bound: float, found: float = mine) -> str:
            return "n/a" if found == NEVER else f"{found / bound:.2f}"

        print(f"{base:<8g}{q:>7g}{caught:>8.1%}{show:>7}{one:>9.0f}{ratio(one):>8}"
              f"{two:>13.0f}{ratio(two):>8}{pair:>8.0f}{ratio(pair):>8}", flush=True)
    print(f"({time.perf_counter() - started:.1f}s)")


if __name__ == "__main__":
    main()
