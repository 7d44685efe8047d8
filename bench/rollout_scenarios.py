"""Issue 23's and 24's scenarios: the gate judged in the situations teams meet.

    python -m bench.rollout_scenarios [--rollouts 1000] [--regressed 200] [--seed 1]
                                      [--jobs 2] [--interval 30] [--quick]

Every rollout goes through `bench.sim_core.rollout`: the gate view built by the
view's own functions (the `concurrent` section by `gatekeeper.view.concurrent`,
the report check, the criterion tests, the drift detector's p0 the power hold
reads), `decide()`, `stages.apply`. The gatekeeper reads **after every run**
(the strict case: each test is valid at every look, and is looked at after
every run; `bench.sim_view.Reader` calls decide() only when what it reads
changed, and is held to the literal reading by `tests/test_rollout_sim.py`)
and, for the healthy scenarios, also on its schedule (every --interval
seconds). Shipped policy (`bench.sim_measure.policy_for`: the floor under the
base rate), 1 job a second, the holdback 0.05 in `full`, the power hold on.
Rollout i of a row is seeded by (seed, row name, i), the same whatever --jobs.

Tables:

1. false rollbacks per healthy scenario (95% Wilson upper bound), target <= 1%
   (upper <= 1.5%), read after every run and on the schedule; the median time a
   healthy rollout takes to reach stable;
2. the candidate worse in every tenant that a targeting rule sends the easy
   tenant: caught before `full` in >= 95% of rollouts;
3. each drop: median candidate runs to the rollback (a miss counts as never), %
   caught, % reaching stable, beside three bounds at a = the rollout's alpha
   (0.01): one-sample against a known p0, two-sample at a 0.1 share, and the
   schedule bound (`bench.sim_bounds`: the information the rollout's own
   allocation accumulates, shadow's pairs then each stage at its share for the
   stage durations a healthy candidate of that base got here);
4. issue 24: the report-rate test and missing runs counted as failed, and the
   per-criterion tests: false rollbacks, and detection;
5. issues 34 and 35: the agents' world (keys that repeat, retries, slow runs under
   an outage, late reports) through the whole gate view and decide(), and its drops
   against the bounds and an mSPRT (`bench.units_sim`, the same arguments).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence

from bench import report_sim, units_sim
from bench.sim_bounds import (
    ROLLOUT_ALPHA,
    one_sample_bound,
    schedule,
    schedule_bound,
    two_sample_bound,
)
from bench.sim_core import Outcome, Shock, Tenant, World
from bench.sim_measure import NEVER, floor_for, policy_for, runs_to_rollback, wilson_upper
from bench.sim_runner import Batch, Runner
from bindings.models import DEFAULT_HOLDBACK, Binding, Stage
from gatekeeper.stats import budget, concurrent, sequential

OUTAGE_S = 300.0
#: The drops of the detection table: (base, candidate's pass rate).
DROPS = [(b, round(b - d, 2)) for b in (0.50, 0.80, 0.95, 0.99) for d in (0.05, 0.10, 0.20)] \
    + [(0.999, 0.99), (0.9999, 0.999)]
#: Healthy plain rows whose stage durations the schedule bound uses, per base.
PLAIN = (0.50, 0.80, 0.95, 0.99, 0.999, 0.9999)
#: The rise a role failing 1 run in 10,000 sets as `gate.power.min_rise` to be
#: powered against a tenfold failure rate (docs/gatekeeper.md, "Rare failures").
RARE_MIN_RISE = 0.0009
RARE = f"0.9999, power.min_rise {RARE_MIN_RISE:g}"


def world(base: float, **extra: object) -> World:
    """The shipped policy at this base rate (floor under it), read after every run."""
    return World(base=base, policy=policy_for(base, hold=True), **extra)  # type: ignore[arg-type]


def rare_world() -> World:
    """Base 0.9999 with the power hold asked to see a tenfold failure rate."""
    policy = policy_for(0.9999, hold=True)
    assert policy.power is not None
    power = policy.power.model_copy(update={"min_rise": RARE_MIN_RISE})
    return World(base=0.9999, policy=policy.model_copy(update={"power": power}))


def healthy_scenarios() -> list[tuple[str, World, float]]:
    """(name, world, candidate's pass rate) for every healthy scenario of issue 23."""
    hard = (Tenant(0.7, 0.97, 0.97), Tenant(0.3, 0.75, 0.75))
    out = [(f"healthy {base:g}", world(base), base) for base in PLAIN]
    out.append((f"healthy {RARE}", rare_world(), 0.9999))
    for stage, after in (("shadow", 300.0), ("canary", 300.0), ("full", 1800.0)):
        out.append((f"outage in {stage} (5 min, both arms)",
                    world(0.95, shock=Shock(stage, after, OUTAGE_S, outage=True)), 0.95))
    out += [
        ("drift 0.95->0.90 mid-canary (both arms)",
         world(0.95, shock=Shock("canary", 450.0, drop=0.05)), 0.95),
        ("drift 0.95->0.90 in full (both arms)", world(0.95, shock=Shock("full", 0.0, drop=0.05)),
         0.95),
        ("rule sends the hard tenant", world(0.91, tenants=hard, rule_tenant=1), 0.91),
        ("new role, no history, 0.9", world(0.9, history=0), 0.9),
        ("new role, no history, 0.5", world(0.5, history=0), 0.5),
        ("tool errors in 5% of runs", world(0.95, tool_error=0.05), 0.95),
        ("tool errors 5%, outage in canary",
         world(0.95, tool_error=0.05, shock=Shock("canary", 300.0, OUTAGE_S, outage=True)),
         0.95),
    ]
    return out


def easy_tenant() -> tuple[World, float]:
    """Worse by 0.05 in both tenants; a rule sends it the easy one in canary and full."""
    return world(0.885, tenants=(Tenant(0.5, 0.97, 0.92), Tenant(0.5, 0.80, 0.75)),
                 rule_tenant=0), 0.885


def issue24_healthy() -> list[tuple[str, World, float]]:
    """Healthy candidates under the report-rate and the criterion tests (issue 24)."""
    keys = ((0.95, 0.95),) * 3
    return [(f"reports {r:.0%} in both arms", report_sim.world(r, r), report_sim.BASE)
            for r in report_sim.HEALTHY if r < 1.0] + [
        ("3 criterion keys at 0.95 in both arms", world(0.95, criteria=keys), 0.95)]


def issue24_regressed() -> list[tuple[str, World, float]]:
    """Candidates whose runs go missing, or that lose one criterion key at an equal pass rate."""
    return [(f"{cur - cand:.0%} of the candidate's runs missing", report_sim.world(cur, cand),
             report_sim.BASE) for cur, cand in report_sim.REGRESSED] + [
        (f"criterion key {a:g} -> {b:g}, pass rate equal",
         world(0.95, criteria=((a, b), (0.95, 0.95), (0.95, 0.95))), 0.95)
        for a, b in ((0.95, 0.80), (1.0, 0.9))]


def kind(outcome: Outcome) -> str:
    """Which test rolled the candidate back, from the decision's reason."""
    reason = outcome.reason
    for prefix, name in (("criterion ", "criterion"), ("report rate", "report rate"),
                         ("stage deadline", "deadline"), ("CUSUM", "CUSUM"),
                         ("shadow McNemar", "stage end"), ("gate failed at", "stage end"),
                         ("candidate pass rate", "stage end")):
        if reason.startswith(prefix) or prefix in reason[:60]:
            return name
    if reason.startswith("sequential evidence"):
        return "e-value (" + reason.split("mostly ", 1)[-1].split(":", 1)[0] + ")"
    return reason[:30] or "?"


def _pct(k: int, n: int) -> str:
    return f"{k / n:.2%} ({k}/{n})"


def _kinds(outcomes: Sequence[Outcome]) -> str:
    found = Counter(kind(o) for o in outcomes if o.rolled_back)
    return ", ".join(f"{name} {n}" for name, n in found.most_common()) or "-"


def durations(outcomes: Sequence[Outcome]) -> list[float]:
    """Median seconds in each of the four stages, over the rollouts that reached stable."""
    done = [o.ends for o in outcomes if o.stage == "stable" and len(o.ends) == 4]
    if not done:
        return [900.0, 900.0, 900.0, 7200.0]
    return [statistics.median(e[i] - (e[i - 1] if i else 0.0) for e in done) for i in range(4)]


def live_shares() -> list[float]:
    """The candidate's share in each live stage after shadow: the canary steps, then full."""
    binding = Binding(current="a", candidate="b", stage=Stage.SHADOW, share=0.0)
    return [s for s in binding.step_shares if s < 1.0] + [1.0 - DEFAULT_HOLDBACK]


def overheads() -> list[str]:
    """What the gate's e-values pay over ln(1/a), in nats, from the modules' constants."""
    a = ROLLOUT_ALPHA
    share = budget.SEQUENTIAL_SHARE
    flips = budget.CONCURRENT_SHADOW_WEIGHTS[budget.FLIPS]
    alone = budget.CONCURRENT_SHADOW_WEIGHTS[budget.CONCURRENT]
    theta = dict(zip(sequential.THETAS, sequential.THETA_WEIGHTS))
    risk = min(concurrent.RISK_WEIGHTS)
    h = concurrent.cusum_h(budget.concurrent_cusum_alpha(a / 4, 3), budget.CUSUM_HORIZON_CELLS)
    return [
        (f"ln(1/a) = {math.log(1 / a):.2f} nats at a = {a:g}; the sequential tests reject at "
         f"ln(1/({share:g} a)) = {math.log(1 / (share * a)):.2f} (+{math.log(1 / share):.2f}: "
         "their share of alpha)"),
        (f"shadow's flips carry weight {flips:g} (+{math.log(1 / flips):.2f}), the "
         f"comparison alone {alone:g} (+{math.log(1 / alone):.2f}); the flips' mixture "
         f"component at theta {max(theta)} costs +{math.log(1 / theta[max(theta)]):.2f}, at "
         f"{min(theta)} +{math.log(1 / theta[min(theta)]):.2f}; the comparison's mixture "
         f"over {len(concurrent.RISKS)} odds ratios +{math.log(1 / risk):.2f} per component"),
        (f"the concurrent CUSUM alarms at h = {h:.1f} nats (a third of 0.1 of the stage "
         "alpha over 10,000 cells)"),
    ]


def main(argv: list[str] | None = None) -> None:
    """Run every table and print it."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000, help="rollouts per healthy row")
    parser.add_argument("--regressed", type=int, default=200, help="rollouts per drop")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--interval", type=float, default=30.0,
                        help="seconds between the gatekeeper's scheduled reads")
    parser.add_argument("--quick", action="store_true", help="40 healthy, 20 regressed per row")
    args = parser.parse_args(argv)
    if args.quick:
        args.rollouts, args.regressed = min(args.rollouts, 40), min(args.regressed, 20)
    started = time.perf_counter()
    n, r, seed = args.rollouts, args.regressed, args.seed
    rows: list[tuple[list[Batch], Callable[[list[list[Outcome]]], None]]] = []
    healthy = healthy_scenarios()
    #: The healthy rollouts whose stage durations a drop's schedule bound uses.
    plain: dict[float | str, list[Outcome]] = {}
    print(f"issue 23 and 24 scenarios, seed {seed}, {args.jobs} jobs: 1 job/s; the gatekeeper "
          f"reads after every run (and on a {args.interval:g} s schedule where shown); "
          f"{n} rollouts per healthy row, {r} per regressed row")
    print("shipped policy: alpha 0.0025 a stage (the rollout's 0.01), min_samples 50, 900 s "
          "stages, 7200 s bake, holdback 0.05, power hold on; floor 0.9, or base - 0.10 "
          "under it")
    print()
    print(f"{'healthy scenario':<42}{'every run: false rollbacks':>30}{'(95% upper)':>12}"
          f"{f'every {args.interval:g} s':>24}{'(upper)':>9}{'h to stable':>12}  rolled back by")

    def healthy_row(name: str, base: float | str | None
                    ) -> Callable[[list[list[Outcome]]], None]:
        def show(found: list[list[Outcome]]) -> None:
            every, sched = found
            if base is not None:
                plain[base] = every
            back = [sum(o.rolled_back for o in x) for x in (every, sched)]
            hours = [e.ends[-1] / 3600 for e in every if e.stage == "stable"]
            other = Counter(o.stage for o in every if o.stage in ("paused", "undecided"))
            print(f"{name:<42}{_pct(back[0], len(every)):>30}"
                  f"{wilson_upper(back[0], len(every)):>12.2%}{_pct(back[1], len(sched)):>24}"
                  f"{wilson_upper(back[1], len(sched)):>9.2%}"
                  f"{statistics.median(hours) if hours else math.nan:>12.2f}  "
                  f"{_kinds(every)}" + (f"; {dict(other)}" if other else ""), flush=True)
        return show

    for name, w, p in healthy:
        base: float | str | None = p if name.startswith("healthy ") else None
        if name == f"healthy {RARE}":
            base = RARE
        rows.append(([Batch(name, w, p, n, seed),
                      Batch(name, dataclasses.replace(w, every_run=False, interval=args.interval),
                            p, n, seed)], healthy_row(name, base)))

    def easy_row(found: list[list[Outcome]]) -> None:
        worse = found[0]
        before = sum(o.rolled_back and o.stage in ("shadow", "canary") for o in worse)
        print()
        print(f"worse by 0.05 in every tenant, a rule sends it the easy one: caught before full "
              f"in {_pct(before, len(worse))}, target >= 95%; caught at all "
              f"{sum(o.rolled_back for o in worse)}, median {runs_to_rollback(worse):.0f} runs; "
              f"{sum(o.stage == 'stable' for o in worse)} reached stable; by "
              f"{_kinds(worse)}", flush=True)

    easy, p_easy = easy_tenant()
    rows.append(([Batch("easy tenant", easy, p_easy, n, seed)], easy_row))

    shares = live_shares()

    def drop_header() -> None:
        print()
        print(f"regressed candidates, {r} rollouts each, read after every run: median candidate "
              f"runs to the rollback (a miss = never); bounds ln(1/a)/I at a = {ROLLOUT_ALPHA:g} "
              "(the rollout's alpha)")
        print("1-sample: against a known p0; 2-sample: against current at a 0.1 share; "
              "schedule: the rollout's own allocation (shadow's pairs, then "
              + ", ".join(f"{s:g}" for s in shares)
              + " for the stage durations healthy rollouts of the base took above); "
              "total: the whole rollout's expected information")
        print(f"{'base':<8}{'q':>7}{'caught':>8}{'<full':>7}{'stable':>7}{'ours':>7}"
              f"{'1-sample':>9}{'ours/1s':>8}{'2-sample':>9}{'ours/2s':>8}{'schedule':>10}"
              f"{'ours/sch':>9}{'total':>8}  rolled back by")

    def drop_row(base: float, q: float, first: bool, key: float | str | None = None,
                 label: str = "") -> Callable[[list[list[Outcome]]], None]:
        def show(found: list[list[Outcome]]) -> None:
            if first:
                drop_header()
            outs = found[0]
            mine = runs_to_rollback(outs)
            k = len(outs)
            segments = schedule(base, q, durations(plain.get(base if key is None else key, [])),
                                shares)
            sched = schedule_bound(segments)
            one, two = one_sample_bound(base, q), two_sample_bound(base, q)

            def ratio(bound: float | None) -> str:
                return "n/a" if mine == NEVER or bound is None else f"{mine / bound:.2f}"

            print(f"{base:<8g}{q:>7g}{sum(o.rolled_back for o in outs) / k:>8.1%}"
                  f"{sum(o.rolled_back and o.stage in ('shadow', 'canary') for o in outs) / k:>7.0%}"
                  f"{sum(o.stage == 'stable' for o in outs) / k:>7.1%}"
                  f"{'never' if mine == NEVER else f'{mine:.0f}':>7}{one:>9.0f}{ratio(one):>8}"
                  f"{two:>9.0f}{ratio(two):>8}"
                  f"{'beyond' if sched.runs is None else f'{sched.runs:.0f}':>10}"
                  f"{ratio(sched.runs):>9}{sched.total:>8.1f}  {_kinds(outs)}{label}", flush=True)
        return show

    for i, (base, q) in enumerate(DROPS):
        rows.append(([Batch(f"drop {base:g} {q:g}", world(base), q, r, seed)],
                     drop_row(base, q, i == 0)))
    rows.append(([Batch(f"drop {RARE} 0.999", rare_world(), 0.999, r, seed)],
                 drop_row(0.9999, 0.999, False, RARE, f"; with power.min_rise {RARE_MIN_RISE:g}")))

    def issue24_row(name: str, healthy_one: bool, first: str | None
                    ) -> Callable[[list[list[Outcome]]], None]:
        def show(found: list[list[Outcome]]) -> None:
            if first:
                print()
                print(first)
            outs = found[0]
            back = sum(o.rolled_back for o in outs)
            if healthy_one:
                print(f"  {name:<44}false rollbacks {_pct(back, len(outs)):>16} "
                      f"(upper {wilson_upper(back, len(outs)):.2%})  by {_kinds(outs)}",
                      flush=True)
            else:
                mine = runs_to_rollback(outs)
                print(f"  {name:<44}caught {back / len(outs):>7.1%}, median "
                      f"{'never' if mine == NEVER else f'{mine:.0f}'} candidate runs, "
                      f"{sum(o.stage == 'stable' for o in outs)} stable; by {_kinds(outs)}",
                      flush=True)
        return show

    title = ("issue 24, read after every run: the report-rate test (and missing runs counted as "
             "failed, the default) and the per-criterion tests (3 gated keys)")
    for i, (name, w, p) in enumerate(issue24_healthy()):
        rows.append(([Batch(name, w, p, n, seed)], issue24_row(name, True, title if i == 0
                                                                else None)))
    for name, w, p in issue24_regressed():
        rows.append(([Batch(name, w, p, r, seed)], issue24_row(name, False, None)))

    runner = Runner(args.jobs)
    flat = [b for batches, _ in rows for b in batches]
    results = runner.run(flat)
    for batches, show in rows:
        show([next(results) for _ in batches])
    print()
    for line in overheads():
        print(line)
    print()
    units_sim.main(argv)
    load = os.getloadavg()
    print(f"({time.perf_counter() - started:.0f} s wall, {args.jobs} jobs, load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end)")


#: floor_for is re-exported for the docs' walk-through of the floors.
__all__ = ["DROPS", "floor_for", "healthy_scenarios", "main"]

if __name__ == "__main__":
    main()
