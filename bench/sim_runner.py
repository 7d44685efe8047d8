"""Batches of seeded rollouts over worker processes; the outcomes do not depend on how many.

Rollout i of a batch named `name` is seeded with "{seed}:{name}:{i}" (a string
seed: `random.Random` hashes it with SHA-512, the same in every process), so a
batch gives the same outcomes whatever `--jobs` is, and batches that share a
name see the same jobs (common random numbers: the every-run and the scheduled
reader of one scenario, or a policy and its variant, meet the same traffic).
Work is cut into chunks of CHUNK rollouts handed out in order; results come
back in order, so a table prints row by row as its rows finish.
"""

from __future__ import annotations

import multiprocessing
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bench.sim_core import Outcome, World, rollout
from bench.sim_view import Rule

#: Rollouts per task: small enough to spread a row over the workers, large enough that
#: handing it out costs nothing.
CHUNK = 10


@dataclass(frozen=True)
class Batch:
    """`count` rollouts of a candidate passing at `p` in `world`, seeded by (seed, name)."""

    name: str
    world: World
    p: float
    count: int
    seed: int = 1
    rule: Rule | None = None


def run_chunk(task: tuple[Batch, int, int]) -> list[Outcome]:
    """Rollouts start..stop-1 of a batch (what a worker runs)."""
    batch, start, stop = task
    return [rollout(batch.world, batch.p, random.Random(f"{batch.seed}:{batch.name}:{i}"),
                    batch.rule) for i in range(start, stop)]


class Runner:
    """Runs batches over `jobs` processes (1: in this one)."""

    def __init__(self, jobs: int = 2) -> None:
        self.jobs = max(1, jobs)

    def run(self, batches: Sequence[Batch]) -> Iterator[list[Outcome]]:
        """Each batch's outcomes, in order, as soon as that batch is done."""
        tasks = [(b, start, min(start + CHUNK, b.count))
                 for b in batches for start in range(0, b.count, CHUNK)]
        sizes = [len(range(0, b.count, CHUNK)) for b in batches]
        if self.jobs == 1:
            chunks: Iterator[list[Outcome]] = map(run_chunk, tasks)
            yield from _regroup(chunks, sizes)
            return
        with multiprocessing.get_context("fork").Pool(self.jobs) as pool:
            yield from _regroup(pool.imap(run_chunk, tasks), sizes)

    def all(self, batches: Sequence[Batch]) -> list[list[Outcome]]:
        """Every batch's outcomes."""
        return list(self.run(batches))


def _regroup(chunks: Iterator[list[Outcome]], sizes: Sequence[int]) -> Iterator[list[Outcome]]:
    for size in sizes:
        found: list[Outcome] = []
        for _ in range(size):
            found.extend(next(chunks))
        yield found
