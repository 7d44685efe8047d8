"""Rollout simulator: the gatekeeper's decide/gate code against seed 000's plain policy.

    python -m bench.rollout_sim [--rollouts 1000] [--regressed 400] [--seed 1]

No HTTP, no Redis: simulated jobs feed the same pure code the gatekeeper runs
(gate.evaluate on a WindowStats, pairing.compare, decide() with its sequential
McNemar and failure-rate tests, the drift CUSUM, stages.apply).

The ladder, the same for every policy: shadow (at least --shadow-runs candidate
runs; the candidate runs every job beside current and its output is discarded)
-> canary 0.1 -> canary 0.5 -> full (each at least --stage-runs candidate runs)
-> stable, --jobs-per-tick jobs a tick. Every policy sees the same jobs (the same
random seed per rollout) and is asked at the end of every tick. Ours is decide()
(min_shadow_pairs = --shadow-runs, min_samples = --stage-runs). The plain policy
is seed 000's check: roll back the moment the pass rate over the candidate's last
W runs (shadow runs included) is under 0.9; otherwise advance once the stage
has its runs. "plain, seed" is W=5 (seed 000 judges on 5 repeats); "plain,
widened" is the smallest W in WIDEN_STEPS with <= 1% false rollbacks. One more
row per policy runs on a shorter shadow (--stage-runs, the old ladder), for reference:
they show how much of the served figure the ladder decides, whatever the check.

Columns: "served" = canary + full jobs the candidate answered before it was rolled
back (users saw those: the issue's exposure); "runs" = served + shadow runs (the
candidate's compute; shadow answers reach no user). A regressed candidate that is
never rolled back served without bound: it counts as infinite in the median and
p90 (printed "never"), so a policy cannot look fast by missing the slow cases.
Jobs pair by key in shadow; the two arms' outcomes on one job share their
randomness with probability --rho each (a job hard for one is often hard for
the other).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from bindings.models import (
    Binding,
    DriftPolicy,
    GatePolicy,
    Stage,
    Thresholds,
    VersionedBinding,
)
from gatekeeper.decide import Action, Evidence, decide, shadow_pairs_needed
from gatekeeper.drift import RUN_FAILURE, params_for
from gatekeeper.gate import evaluate
from gatekeeper.pairing import Pair, Run, compare
from gatekeeper.stages import Event, apply
from gatekeeper.statistics import Cusum
from gatekeeper.window import WindowStats

BASE_RATE = 0.95
PLAIN_THRESHOLD = 0.9
LEVELS = (0.90, 0.85, 0.75)
#: Seed 000 judges on 5 repeats against a 0.9 floor: its window as the seed sets it.
SEED_WINDOW = 5
WIDEN_STEPS = (5, 10, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200, 220, 240, 260, 280,
               300, 320, 340, 360, 380, 400, 440, 480, 560, 640, 800, 1000, 1200)
NEVER = math.inf


@dataclass(frozen=True)
class Setup:
    """The simulated traffic, the ladder, and our policy."""

    jobs_per_tick: int
    shadow_runs: int
    stage_runs: int
    rho: float
    reference_runs: int
    policy: GatePolicy

    def stage_length(self, stage: Stage) -> int:
        """Candidate runs a stage lasts at least (the plain policy advances right there)."""
        return self.shadow_runs if stage is Stage.SHADOW else self.stage_runs


@dataclass(frozen=True)
class Outcome:
    """One simulated rollout: rolled back or not, candidate runs, and jobs it served."""

    rolled_back: bool
    runs: int
    served: int
    stage: str


def _job(rng: random.Random, p_current: float, p_candidate: float,
         rho: float) -> tuple[bool, bool]:
    shared = rng.random()
    u_current = shared if rng.random() < rho else rng.random()
    u_candidate = shared if rng.random() < rho else rng.random()
    return u_current < p_current, u_candidate < p_candidate


def _start(policy: GatePolicy) -> VersionedBinding:
    binding = Binding(current="cfg-a", candidate="cfg-b", stage=Stage.SHADOW, share=0.0,
                      gate=policy, stage_since=0.0)
    return VersionedBinding(role="sim", version=1, binding=binding, updated_at=0.0,
                            updated_by="sim")


@dataclass
class StageTally:
    """Counts over the current stage, kept as runs arrive (no rescans per tick)."""

    n: int = 0
    passes: int = 0
    current_n: int = 0
    current_passes: int = 0
    #: Shadow only: pass->fail and fail->pass flips among the pairs.
    regressions: int = 0
    improvements: int = 0


Rule = Callable[[VersionedBinding, StageTally, list[Pair], float], Action]


def simulate(setup: Setup, p_candidate: float, rng: random.Random, rule: Rule,
             on_run: Callable[[Run], None] | None = None,
             on_advance: Callable[[], None] | None = None) -> Outcome:
    """Walk one rollout tick by tick; `rule` decides at each tick's end."""
    record = _start(setup.policy)
    runs = served = 0
    now = 0.0
    tally = StageTally()
    pairs: list[Pair] = []
    key = 0
    while True:
        now += 1.0
        binding = record.binding
        for _ in range(setup.jobs_per_tick):
            key += 1
            k = str(key)
            if binding.stage is Stage.SHADOW:
                ok_current, ok_candidate = _job(rng, BASE_RATE, p_candidate, setup.rho)
                cand = Run(k, ok_candidate)
                pairs.append(Pair(k, Run(k, ok_current), cand))
                tally.current_n += 1
                tally.current_passes += ok_current
                tally.regressions += ok_current and not ok_candidate
                tally.improvements += ok_candidate and not ok_current
            elif binding.stage is Stage.FULL or rng.random() < binding.share:
                # Outside shadow each job runs on one arm only: nothing to correlate.
                ok_candidate = rng.random() < p_candidate
                cand = Run(k, ok_candidate)
                served += 1
            else:
                tally.current_n += 1
                tally.current_passes += rng.random() < BASE_RATE
                continue
            runs += 1
            tally.n += 1
            tally.passes += ok_candidate
            if on_run is not None:
                on_run(cand)
        action = rule(record, tally, pairs, now)
        if action is Action.ROLLBACK:
            return Outcome(True, runs, served, binding.stage.value)
        if action is Action.ADVANCE:
            moved = apply(binding, Event.ADVANCE, now).binding
            if moved.stage is Stage.STABLE:
                return Outcome(False, runs, served, "stable")
            record = record.model_copy(update={"binding": moved, "version": record.version + 1})
            tally, pairs = StageTally(), []
            if on_advance is not None:
                on_advance()


def ours(setup: Setup, p_candidate: float, rng: random.Random) -> Outcome:
    """The gatekeeper's rule: gate + paired McNemar (sequential and final) + CUSUM + decide()."""
    policy = setup.policy
    # p0 as the gate view takes it: the current arm's running aggregate.
    reference = WindowStats({"n": setup.reference_runs, "passes": sum(
        rng.random() < BASE_RATE for _ in range(setup.reference_runs))})
    params = params_for(RUN_FAILURE, policy.drift, reference, policy.thresholds.min_samples)
    assert params is not None
    p0, p1 = params.p0, params.p1
    detector = [Cusum(p0=p0, p1=p1, h=params.h)]
    alarmed = [False]
    needed = shadow_pairs_needed(policy.thresholds)

    def feed(run: Run) -> None:
        # Incremental, but the same detector the gate view advances over the stage's stream.
        alarmed[0] = detector[0].update(not run.passed) or alarmed[0]

    def next_stage() -> None:
        # A new stage starts fresh detectors (a new stage_since), as in the gate view.
        detector[0] = Cusum(p0=p0, p1=p1, h=params.h)
        alarmed[0] = False

    def rule(record: VersionedBinding, tally: StageTally, pairs: list[Pair],
             now: float) -> Action:
        binding = record.binding
        # The canonical form of a window is its counts map: the same object the
        # trace store's aggregate hash rebuilds.
        window = WindowStats({"n": tally.n, "passes": tally.passes})
        verdict = evaluate(window, policy)
        paired = None
        if binding.stage is Stage.SHADOW:
            flips = {"pass_to_fail": tally.regressions, "fail_to_pass": tally.improvements}
            # The final McNemar look is taken once, with min_shadow_pairs pairs (the
            # gate view should pass the same min_samples). Below that the report can
            # only say "insufficient" (no trajectories here to block on), so the O(n)
            # pass is skipped; the flips feed the sequential test at every tick.
            paired = (compare(pairs, alpha=policy.thresholds.alpha,
                              min_samples=needed).as_dict()
                      if len(pairs) >= needed
                      else {"verdict": "insufficient", "reasons": [], "pairs": len(pairs),
                            "flips": flips})
        evidence = Evidence(
            verdict=verdict.verdict, reasons=tuple(r.message for r in verdict.reasons),
            n=window.n, passes=window.passes, current_n=tally.current_n,
            current_passes=tally.current_passes, paired=paired, baseline_failure=p0,
            baseline_runs=params.reference,
            candidate_alarms=(RUN_FAILURE,) if alarmed[0] else (),
        )
        return decide("sim", record, evidence, now).action

    return simulate(setup, p_candidate, rng, rule, on_run=feed, on_advance=next_stage)


def plain(setup: Setup, p_candidate: float, rng: random.Random, window: int) -> Outcome:
    """Seed 000: roll back when the last `window` candidate runs pass under 0.9; else advance."""
    recent: deque[bool] = deque(maxlen=window)
    passes = [0]

    def feed(run: Run) -> None:
        if len(recent) == window:
            passes[0] -= recent[0]
        recent.append(run.passed)
        passes[0] += run.passed

    def rule(record: VersionedBinding, tally: StageTally, pairs: list[Pair],
             now: float) -> Action:
        if len(recent) == window and passes[0] / window < PLAIN_THRESHOLD:
            return Action.ROLLBACK
        if tally.n >= setup.stage_length(record.binding.stage):
            return Action.ADVANCE
        return Action.HOLD

    # Drawing the reference history keeps the job stream identical to ours per seed.
    for _ in range(setup.reference_runs):
        rng.random()
    return simulate(setup, p_candidate, rng, rule, on_run=feed)


def batch(run_one: Callable[[random.Random], Outcome], count: int, seed: int,
          give_up_after: int | None = None) -> list[Outcome]:
    """`count` rollouts, rollout i seeded with (seed, i) so every policy sees the same jobs.

    With `give_up_after`, stop early once more than that many rollouts rolled back
    (the window search only needs to know the rate is over budget).
    """
    out: list[Outcome] = []
    back = 0
    for i in range(count):
        out.append(run_one(random.Random(f"{seed}:{i}")))
        back += out[-1].rolled_back
        if give_up_after is not None and back > give_up_after:
            break
    return out


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class Cell:
    """One policy at one pass rate: how often it rolled back, and the exposure quantiles."""

    rate: float
    served_median: float
    served_p90: float
    runs_median: float
    runs_p90: float


def cell(outcomes: list[Outcome], *, until_rollback: bool) -> Cell:
    """Quantiles of served jobs and runs; `until_rollback` counts a missed rollback as never."""
    back = sum(o.rolled_back for o in outcomes)

    def of(o: Outcome, value: int) -> float:
        return NEVER if until_rollback and not o.rolled_back else float(value)

    served = [of(o, o.served) for o in outcomes]
    runs = [of(o, o.runs) for o in outcomes]
    return Cell(back / len(outcomes), _quantile(served, 0.5), _quantile(served, 0.9),
                _quantile(runs, 0.5), _quantile(runs, 0.9))


def _n(value: float) -> str:
    return "never" if value == NEVER else f"{value:.0f}"


def _ratio(ours_value: float, theirs: float) -> str:
    if ours_value == NEVER or theirs == NEVER:
        return "n/a (never)"
    if theirs == 0:
        return "0/0 (both 0)" if ours_value == 0 else "inf"
    return f"{ours_value / theirs:.2f}"


def widen(run_healthy: Callable[[int], list[Outcome]], rollouts: int) -> int:
    """The smallest window in WIDEN_STEPS whose false-rollback rate is at most 1%."""
    budget = int(0.01 * rollouts)
    for w in WIDEN_STEPS:
        trial = run_healthy(w)
        if len(trial) == rollouts and sum(o.rolled_back for o in trial) <= budget:
            return w
    return WIDEN_STEPS[-1]


def main() -> None:
    """Run every policy over the same jobs and print the tables."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000, help="healthy rollouts per policy")
    parser.add_argument("--regressed", type=int, default=400, help="rollouts per regression")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs-per-tick", type=int, default=20)
    parser.add_argument("--shadow-runs", type=int, default=1000,
                        help="shadow length for every policy (ours: min_shadow_pairs)")
    parser.add_argument("--stage-runs", type=int, default=200,
                        help="canary step and full length (ours: min_samples)")
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--alpha", type=float, default=0.0005)
    parser.add_argument("--shift", type=float, default=0.10)
    parser.add_argument("--h", type=float, default=10.0)
    args = parser.parse_args()

    policy = GatePolicy(
        thresholds=Thresholds(min_pass_rate=0.9, min_samples=args.stage_runs, alpha=args.alpha,
                              min_shadow_pairs=args.shadow_runs),
        drift=DriftPolicy(shift=args.shift, h=args.h),
    )
    setup = Setup(jobs_per_tick=args.jobs_per_tick, shadow_runs=args.shadow_runs,
                  stage_runs=args.stage_runs, rho=args.rho, reference_runs=2000, policy=policy)
    short_policy = policy.model_copy(update={"thresholds": policy.thresholds.model_copy(
        update={"min_shadow_pairs": args.stage_runs})})
    short = Setup(jobs_per_tick=args.jobs_per_tick, shadow_runs=args.stage_runs,
                  stage_runs=args.stage_runs, rho=args.rho, reference_runs=2000,
                  policy=short_policy)
    started = time.perf_counter()

    def plain_on(on: Setup, w: int) -> Callable[[float, int], list[Outcome]]:
        return lambda p, n: batch(lambda rng: plain(on, p, rng, w), n, args.seed)

    def widened_on(on: Setup) -> int:
        return widen(lambda w: batch(lambda rng: plain(on, BASE_RATE, rng, w), args.rollouts,
                                     args.seed, give_up_after=int(0.01 * args.rollouts)),
                     args.rollouts)

    wide, wide_short = widened_on(setup), widened_on(short)
    rows: list[tuple[str, Callable[[float, int], list[Outcome]]]] = [
        ("ours (decide)",
         lambda p, n: batch(lambda rng: ours(setup, p, rng), n, args.seed)),
        (f"plain, seed W={SEED_WINDOW}", plain_on(setup, SEED_WINDOW)),
        (f"plain, widened W={wide}", plain_on(setup, wide)),
        (f"ours, shadow {args.stage_runs}*",
         lambda p, n: batch(lambda rng: ours(short, p, rng), n, args.seed)),
        (f"plain, widened W={wide_short}, shadow {args.stage_runs}*", plain_on(short, wide_short)),
    ]
    print(f"rollout simulator: base pass rate {BASE_RATE}, {args.jobs_per_tick} jobs/tick, "
          f"rho {args.rho}, seed {args.seed}")
    print(f"ladder (every policy): shadow >= {args.shadow_runs} candidate runs, then canary 0.1, "
          f"canary 0.5, full, each >= {args.stage_runs}; checked every tick")
    print(f"ours: min_shadow_pairs {args.shadow_runs}, min_samples {args.stage_runs}, "
          f"min_pass_rate 0.9, alpha {args.alpha} for each of: sequential McNemar, final "
          f"McNemar, sequential rate test, stage-end unpaired look; CUSUM shift {args.shift} "
          f"h {args.h}")
    print("plain: roll back when the last W candidate runs (shadow included) pass under 0.9; "
          "advance when the stage has its runs")
    print(f"* the old ladder (shadow >= {args.stage_runs}; ours with min_shadow_pairs "
          f"{args.stage_runs}), for reference; not in the ratios")
    print()
    print(f"healthy candidate (p={BASE_RATE}), {args.rollouts} rollouts: false rollbacks, "
          "and what reaching stable took (median)")
    print(f"{'policy':<44} {'false rb':>9} {'served':>8} {'runs':>8}")
    results: dict[str, dict[float, Cell]] = {}
    for name, run in rows:
        healthy = cell(run(BASE_RATE, args.rollouts), until_rollback=False)
        results[name] = {BASE_RATE: healthy}
        print(f"{name:<44} {healthy.rate:>9.2%} {_n(healthy.served_median):>8} "
              f"{_n(healthy.runs_median):>8}")
    print()
    print(f"regressed candidates, {args.regressed} rollouts per level: jobs SERVED before the "
          "rollback (canary + full; users saw them) and candidate RUNS (served + shadow)")
    print(f"{'p':<6}{'policy':<44} {'caught':>7} {'served med':>11} {'p90':>6} "
          f"{'runs med':>9} {'p90':>6}")
    for p in LEVELS:
        for name, run in rows:
            c = cell(run(p, args.regressed), until_rollback=True)
            results[name][p] = c
            print(f"{p:<6.2f}{name:<44} {c.rate:>7.0%} {_n(c.served_median):>11} "
                  f"{_n(c.served_p90):>6} {_n(c.runs_median):>9} {_n(c.runs_p90):>6}")
    ours_name, wide_name = rows[0][0], rows[2][0]
    print()
    print("ours / widened plain (same ladder), medians; target: served <= 0.50")
    for p in LEVELS:
        o, w = results[ours_name][p], results[wide_name][p]
        print(f"  p={p:.2f}: served {_ratio(o.served_median, w.served_median):>12}   "
              f"runs {_ratio(o.runs_median, w.runs_median)}")
    if any(results[ours_name][p].served_median == results[wide_name][p].served_median == 0
           for p in LEVELS):
        print("  0/0: both medians are 0 jobs served (caught in shadow). The served target then "
              "holds only trivially: the ladder's shadow, not the check, kept users out; the runs "
              "ratio is where the checks differ.")
    print(f"({time.perf_counter() - started:.1f}s)")


if __name__ == "__main__":
    main()
