"""Rollout simulator: the gatekeeper's decide/gate code against seed 000's plain policy.

    python -m bench.rollout_sim [--rollouts 1000] [--regressed 400] [--seed 1]

No HTTP, no Redis: simulated jobs feed the same pure code the gatekeeper runs
(gate.evaluate on a WindowStats, pairing.compare, the drift CUSUM, decide(),
stages.apply). Each rollout walks shadow -> canary 0.1 -> canary 0.5 -> full
(bake) -> stable; a stage ends once the candidate has `--stage-runs` runs in it.
The plain policy walks the same schedule over the same jobs (same random seed per
rollout) but rolls back the moment the pass rate over its last W candidate runs
drops under 0.9, re-checked every tick.

Exposure = candidate runs before the rollback (shadow runs included: they cost a
run each; "served" = canary + full runs only, the ones users saw).
Jobs pair by key in shadow; the two arms' outcomes on one job share their
randomness with probability --rho (a job that is hard for one is often hard for
the other).

Why 0.95 -> 0.90 stays near the widened plain policy: with unpaired runs,
one fixed look at ~115 runs (half the widened window's median) rolling back on
>= 12 failures already costs more than the whole 1% false-rollback budget (1.3%
at 0.95) and still catches only 48% of the 0.90 candidates.
Larger regressions are where a CUSUM and stage looks win.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from bindings.models import (
    Binding, DriftPolicy, GatePolicy, Stage, Thresholds, VersionedBinding,
)
from gatekeeper.decide import Action, Evidence, decide
from gatekeeper.drift import RUN_FAILURE, baseline
from gatekeeper.gate import evaluate
from gatekeeper.pairing import Pair, Run, compare
from gatekeeper.stages import Event, apply
from gatekeeper.statistics import Cusum
from gatekeeper.window import WindowStats

BASE_RATE = 0.95
PLAIN_THRESHOLD = 0.9
#: Seed 000 judges on 5 repeats against a 0.9 floor: its window as the seed sets it.
SEED_WINDOW = 5
WIDEN_STEPS = (5, 10, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200, 220, 240, 260, 280,
               300, 340, 380, 420, 480, 560, 640, 800)


@dataclass(frozen=True)
class Setup:
    """The simulated traffic and the policy under test."""

    jobs_per_tick: int
    stage_runs: int
    rho: float
    reference_runs: int
    policy: GatePolicy


@dataclass(frozen=True)
class Outcome:
    """One simulated rollout: rolled back or not, and how many candidate runs it took."""

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
    """The gatekeeper's rule: gate + paired McNemar + drift CUSUM + decide()."""
    policy = setup.policy
    reference = [Run(str(i), rng.random() < BASE_RATE) for i in range(setup.reference_runs)]
    p0 = baseline(RUN_FAILURE, policy.drift, reference)
    assert p0 is not None
    p1 = min(1.0, p0 + policy.drift.shift)
    detector = [Cusum(p0=p0, p1=p1, h=policy.drift.h)]
    alarmed = [False]

    def feed(run: Run) -> None:
        # Incremental, but the same detector the gate view replays from the stage's stream.
        alarmed[0] = detector[0].update(not run.passed) or alarmed[0]

    def next_stage() -> None:
        # The gate view replays the runs since the stage began: a fresh detector per stage.
        detector[0] = Cusum(p0=p0, p1=p1, h=policy.drift.h)

    def rule(record: VersionedBinding, tally: StageTally, pairs: list[Pair],
             now: float) -> Action:
        binding = record.binding
        # The canonical form of a window is its counts map: the same object the
        # trace store's aggregate hash rebuilds.
        window = WindowStats({"n": tally.n, "passes": tally.passes})
        verdict = evaluate(window, policy)
        paired = None
        if binding.stage is Stage.SHADOW:
            # Below min_samples the paired verdict can only be "insufficient" (no
            # trajectories here to block on), so skip the O(n) pass until then.
            paired = (compare(pairs, alpha=policy.thresholds.alpha,
                              min_samples=policy.thresholds.min_samples).as_dict()
                      if len(pairs) >= policy.thresholds.min_samples
                      else {"verdict": "insufficient", "reasons": []})
        evidence = Evidence(
            verdict=verdict.verdict, reasons=tuple(r.message for r in verdict.reasons),
            n=window.n, passes=window.passes, current_n=tally.current_n,
            current_passes=tally.current_passes, paired=paired,
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
        return Action.ADVANCE if tally.n >= setup.stage_runs else Action.HOLD

    # Drawing the reference history keeps the job stream identical to ours per seed.
    for _ in range(setup.reference_runs):
        rng.random()
    return simulate(setup, p_candidate, rng, rule, on_run=feed)


def batch(run_one: Callable[[random.Random], Outcome], count: int, seed: int,
          give_up_after: int | None = None) -> list[Outcome]:
    """`count` rollouts, rollout i seeded with (seed, i) so every policy sees the same jobs.

    With `give_up_after`, stop early once that many rollouts rolled back (the
    window search only needs to know the rate is over budget).
    """
    out: list[Outcome] = []
    back = 0
    for i in range(count):
        out.append(run_one(random.Random(f"{seed}:{i}")))
        back += out[-1].rolled_back
        if give_up_after is not None and back > give_up_after:
            break
    return out


def summary(outcomes: list[Outcome]) -> tuple[float, float, float, float]:
    """(rollback rate, median runs, p90 runs, median served) over rolled-back rollouts."""
    back = [o for o in outcomes if o.rolled_back]
    rate = len(back) / len(outcomes)
    if not back:
        return rate, float("nan"), float("nan"), float("nan")
    runs = sorted(o.runs for o in back)
    p90 = runs[min(len(runs) - 1, int(0.9 * len(runs)))]
    return rate, statistics.median(runs), float(p90), statistics.median(o.served for o in back)


def main() -> None:
    """Run both policies side by side and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000, help="healthy rollouts per policy")
    parser.add_argument("--regressed", type=int, default=400, help="rollouts per regression")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs-per-tick", type=int, default=20)
    parser.add_argument("--stage-runs", type=int, default=200)
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--alpha", type=float, default=0.0002)
    parser.add_argument("--shift", type=float, default=0.10)
    parser.add_argument("--h", type=float, default=6.0)
    args = parser.parse_args()

    policy = GatePolicy(
        thresholds=Thresholds(min_pass_rate=0.9, min_samples=args.stage_runs, alpha=args.alpha),
        drift=DriftPolicy(shift=args.shift, h=args.h),
    )
    setup = Setup(jobs_per_tick=args.jobs_per_tick, stage_runs=args.stage_runs, rho=args.rho,
                  reference_runs=2000, policy=policy)
    started = time.perf_counter()
    levels = (0.90, 0.85, 0.75)

    def ours_at(p: float, n: int) -> list[Outcome]:
        return batch(lambda rng: ours(setup, p, rng), n, args.seed)

    def plain_at(p: float, n: int, w: int, give_up_after: int | None = None) -> list[Outcome]:
        return batch(lambda rng: plain(setup, p, rng, w), n, args.seed, give_up_after)

    # Widen the plain window until its false-rollback rate is at most 1%.
    budget = int(0.01 * args.rollouts)
    widened = WIDEN_STEPS[-1]
    for w in WIDEN_STEPS:
        trial = plain_at(BASE_RATE, args.rollouts, w, give_up_after=budget)
        if len(trial) == args.rollouts and summary(trial)[0] <= 0.01:
            widened = w
            break

    rows = [("ours (decide + gate + McNemar + CUSUM)", ours_at),
            (f"plain, seed window W={SEED_WINDOW}",
             lambda p, n: plain_at(p, n, SEED_WINDOW)),
            (f"plain, widened W={widened}", lambda p, n: plain_at(p, n, widened))]
    print(f"rollout simulator: {args.rollouts} healthy and {args.regressed} regressed rollouts "
          f"per cell; base pass rate {BASE_RATE}; {args.jobs_per_tick} jobs/tick; stages "
          f"shadow, canary 0.1, canary 0.5, full, each >= {args.stage_runs} candidate runs; "
          f"rho {args.rho}; alpha {args.alpha}; CUSUM shift {args.shift} h {args.h}")
    header = (f"{'policy':<40} {'false rb':>9} " + " ".join(
        f"{'p=' + format(p, '.2f') + ' med/p90 (served)':>28}" for p in levels))
    print(header)
    print("-" * len(header))
    medians: dict[str, list[float]] = {}
    for name, run in rows:
        healthy = summary(run(BASE_RATE, args.rollouts))
        cells = []
        medians[name] = []
        for p in levels:
            rate, med, p90, served = summary(run(p, args.regressed))
            medians[name].append(med)
            cells.append(f"{med:>6.0f}/{p90:<5.0f}({served:>4.0f}) caught {rate:>4.0%}")
        print(f"{name:<40} {healthy[0]:>9.2%} " + " ".join(f"{c:>28}" for c in cells))
    ours_name, wide_name = rows[0][0], rows[2][0]
    ratios = [o / w for o, w in zip(medians[ours_name], medians[wide_name])]
    print("median exposure, ours / widened plain: " + ", ".join(
        f"p={p:.2f}: {r:.2f}" for p, r in zip(levels, ratios)))
    print(f"({time.perf_counter() - started:.1f}s)")


if __name__ == "__main__":
    main()
