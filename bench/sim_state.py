"""What the stores would hold for one simulated stage: the counts `bench.sim_view` reads.

The traffic loop (`bench.sim_core`) writes these in place, one run at a time,
in the shape the router's stores keep them: each arm's counts, shadow's pairs
and flips, the concurrent cells per (30 s bucket, stratum) (as plain numbers
per bucket, or, for the literal reference reader, as the window fields
`window.increments` writes), the assignments and reports per bucket
(`gatekeeper.stats.reports`), and each criterion key's results over the
newest `scored.SAMPLE` runs per arm, the window the gate view's
`by_criterion` section scores.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.stats.concurrent import bucket_of
from gatekeeper.stats.drift import RUN_FAILURE, TOOL_ERROR, Detector
from gatekeeper.stats.pairing import Run
from gatekeeper.stats.rollout import Carried
from gatekeeper.view.concurrent import Folded
from gatekeeper.view.scored import SAMPLE
from gatekeeper.window import CELL_EVENTS, CELL_N, WindowStats

#: The candidate's newest outcomes kept for a rule that reads them (`sim_view.plain_rule`).
RECENT = 64
#: Per (bucket, stratum): candidate's runs, failures, tool errors; current's the same.
CN, CF, CE, KN, KF, KE = range(6)


@dataclass
class Reports:
    """Assigned and reported runs per time bucket, per arm (the router's exposure counts
    and the windows' `rp:` fields)."""

    candidate: tuple[dict[int, int], dict[int, int]] = field(default_factory=lambda: ({}, {}))
    current: tuple[dict[int, int], dict[int, int]] = field(default_factory=lambda: ({}, {}))


class Criteria:
    """Each criterion key's results over the newest SAMPLE runs of each arm, and in shadow
    over the paired jobs among them (current passed the key and the candidate failed it:
    lost; the reverse: gained), as `view.criteria.gate_counts` counts them."""

    def __init__(self, keys: int) -> None:
        self.keys = keys
        self.runs: tuple[deque[int], deque[int]] = (deque(), deque())
        #: Per arm (candidate, current), per key: passes among the newest runs.
        self.passed = ([0] * keys, [0] * keys)
        self.pairs: deque[tuple[int, int]] = deque()
        self.lost = [0] * keys
        self.gained = [0] * keys

    def add(self, arm: int, mask: int) -> None:
        """One run of `arm` (0 candidate, 1 current); bit k of `mask` set: key k passed."""
        runs, passed = self.runs[arm], self.passed[arm]
        runs.append(mask)
        for k in range(self.keys):
            passed[k] += (mask >> k) & 1
        if len(runs) > SAMPLE:
            old = runs.popleft()
            for k in range(self.keys):
                passed[k] -= (old >> k) & 1

    def pair(self, current: int, candidate: int) -> None:
        """One shadow job both arms ran (after `add` for each)."""
        self.pairs.append((current, candidate))
        self._flips(current, candidate, 1)
        if len(self.pairs) > SAMPLE:
            self._flips(*self.pairs.popleft(), -1)

    def _flips(self, current: int, candidate: int, sign: int) -> None:
        for k in range(self.keys):
            was, now = (current >> k) & 1, (candidate >> k) & 1
            if was and not now:
                self.lost[k] += sign
            elif now and not was:
                self.gained[k] += sign

    def counts(self, shadow: bool) -> tuple[tuple[int, int, int, int, int | None, int | None],
                                            ...]:
        """Per key: (passed, failed, current passed, current failed, lost, gained)."""
        out = []
        for k in range(self.keys):
            mine, theirs = self.passed[0][k], self.passed[1][k]
            out.append((mine, len(self.runs[0]) - mine, theirs, len(self.runs[1]) - theirs,
                        self.lost[k] if shadow else None, self.gained[k] if shadow else None))
        return tuple(out)


@dataclass
class StageCounts:
    """What the stores would hold for the stage so far, and what a reader keeps of it."""

    cand_n: int = 0
    cand_passes: int = 0
    cur_n: int = 0
    cur_passes: int = 0
    pairs: int = 0
    regressions: int = 0
    improvements: int = 0
    #: The candidate's newest outcomes (True: passed), for `plain_rule`.
    recent: deque[bool] = field(default_factory=lambda: deque(maxlen=RECENT))
    #: Every candidate run as the stream holds it (only for the gate before issue 23:
    #: its drift detector reads them).
    entries: list[tuple[str, Run]] = field(default_factory=list)
    detector: Detector | None = None
    #: Counts of current's carried history at the stage's start (and its n and passes).
    carried: WindowStats = field(default_factory=WindowStats)
    carried_n: int = 0
    carried_passes: int = 0
    #: The rollout's earlier stages, as the view's `rollout` section shows them.
    rollout: Carried | None = None
    #: False: the view has no `concurrent` section (`World.concurrent`).
    concurrent: bool = True
    #: True: the cells are also written as window fields, for `section_of` from scratch.
    literal: bool = False
    cand_cells: WindowStats = field(default_factory=WindowStats)
    cur_cells: WindowStats = field(default_factory=WindowStats)
    #: Buckets not yet folded into `folded`, oldest first: [bucket, {stratum: counts}],
    #: the counts indexed by CN..KE.
    buckets: deque[list[Any]] = field(default_factory=deque)
    folded: Folded | None = None
    #: The same buckets, kept for the run-failure fold that counts missing runs as failed
    #: (it lags `folded` while report buckets are in their grace).
    raw: deque[list[Any]] = field(default_factory=deque)
    reports: Reports | None = None
    criteria: Criteria | None = None
    #: The reader's memo of this stage's pure parts of the view.
    cache: dict[str, Any] = field(default_factory=dict)

    def cell(self, arm: str, time: float, stratum: str, passed: bool, error: bool) -> None:
        """Count one run in its (bucket, stratum) cell as ingest's increments do (literal)."""
        fields = (self.cand_cells if arm == "candidate" else self.cur_cells).fields
        cell = f"{bucket_of(time)}:{stratum}"
        fields[CELL_N + cell] += 1
        if not passed:
            fields[CELL_EVENTS[RUN_FAILURE] + cell] += 1
        if error:
            fields[CELL_EVENTS[TOOL_ERROR] + cell] += 1
