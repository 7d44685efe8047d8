"""Shadow pairing kept as a running tally, advanced over the runs that arrived since.

`pairing.compare(pairing.pair_runs(current, shadow))` judges a whole stage at
once. The gate view cannot replay a stage on every read, so it keeps a `Tally`
(running pair, flip and trajectory counts, the first listed keys, and the last
stream id counted per arm) plus, per job key, the runs still waiting for their
mate, and folds only new stream entries into them with `advance`. Pure: the
state lives in Redis (`gatekeeper.store.paired_state`); this module does no I/O.

Pairing is the one-shot rule: a key's k-th current run pairs with its k-th
shadow run. At most one arm has runs waiting on a key (a run arriving on the
other arm takes the oldest waiting one), so the result does not depend on how
the two streams' entries interleave across reads. The listed keys are the
first `MAX_LISTED_KEYS` by the shadow run's stream id, which is the order the
one-shot report lists them in; the counts stay exact beyond the lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gatekeeper.stats.drift import stream_order
from gatekeeper.stats.pairing import MAX_LISTED_KEYS, PairedReport, Run, shadow_verdict
from gatekeeper.stats.statistics import mcnemar_exact
from gatekeeper.checks.trajectory import Change, classify, lost_tools

CURRENT = "current"
SHADOW = "shadow"
ARMS = (CURRENT, SHADOW)


@dataclass(frozen=True)
class Waiting:
    """One run waiting for its mate: its stream id, outcome and tool sequence."""

    id: str
    passed: bool
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class Queue:
    """The runs of one key waiting for a mate: the arm they came from, oldest first."""

    arm: str
    runs: tuple[Waiting, ...] = ()


@dataclass(frozen=True)
class Listed:
    """A key shown in a report list, with the shadow run's stream id that orders it."""

    id: str
    key: str
    lost: tuple[str, ...] = ()


def _no_changes() -> dict[str, int]:
    return {change.value: 0 for change in Change}


@dataclass(frozen=True)
class Tally:
    """The paired comparison of one shadow stage after the entries up to the last ids."""

    #: The required tools blocking was judged against: a new list means a new tally.
    required: tuple[str, ...] = ()
    pairs: int = 0
    both_pass: int = 0
    both_fail: int = 0
    regressions: int = 0
    improvements: int = 0
    trajectory: Mapping[str, int] = field(default_factory=_no_changes)
    regressed: tuple[Listed, ...] = ()
    improved: tuple[Listed, ...] = ()
    blocking: tuple[Listed, ...] = ()
    #: Exact count of blocking pairs and every tool they lost (the lists are capped).
    blocking_n: int = 0
    lost: tuple[str, ...] = ()
    last_current: str = ""
    last_shadow: str = ""

    def last(self, arm: str) -> str:
        """The id of the last stream entry of `arm` counted ("" before the first)."""
        return self.last_current if arm == CURRENT else self.last_shadow

    def report(self, *, alpha: float, min_samples: int) -> PairedReport:
        """The report `pairing.compare` gives over the same pairs (McNemar from the flips)."""
        one_sided, two_sided = mcnemar_exact(self.regressions, self.improvements)
        verdict, reasons = shadow_verdict(self.pairs, self.regressions, self.improvements,
                                          one_sided, self.blocking_n, self.lost, alpha=alpha,
                                          min_samples=min_samples)
        return PairedReport(
            pairs=self.pairs, both_pass=self.both_pass, both_fail=self.both_fail,
            regressions=self.regressions, improvements=self.improvements,
            p_one_sided=one_sided, p_two_sided=two_sided,
            trajectory=dict(self.trajectory),
            regressed_keys=[item.key for item in self.regressed],
            improved_keys=[item.key for item in self.improved],
            blocking=[{"key": item.key, "lost": list(item.lost)} for item in self.blocking],
            verdict=verdict, reasons=reasons)


@dataclass(frozen=True)
class Step:
    """A tally after one advance, and the keys whose waiting runs changed."""

    tally: Tally
    #: key -> its queue now (no runs: the key waits no more); only keys that changed.
    changed: dict[str, Queue]
    #: key -> its queue before, for the keys in `changed` (absent: nothing waited).
    before: dict[str, Queue]


def fresh_entries(entries: Sequence[tuple[str, Run]], after: str) -> Sequence[tuple[str, Run]]:
    """The `entries` (oldest first) newer than stream id `after`."""
    floor = stream_order(after)
    skip = 0
    while skip < len(entries) and stream_order(entries[skip][0]) <= floor:
        skip += 1
    return entries[skip:]


def keys_of(current: Sequence[tuple[str, Run]], shadow: Sequence[tuple[str, Run]]) -> set[str]:
    """The job keys a batch touches: the waiting runs `advance` needs loaded."""
    return {run.key for _, run in (*current, *shadow) if run.key}


def advance(tally: Tally, waiting: Mapping[str, Queue], current: Sequence[tuple[str, Run]],
            shadow: Sequence[tuple[str, Run]]) -> Step:
    """Fold new (stream id, run) entries of each arm, oldest first, into the tally.

    `waiting` holds the queues of (at least) the keys the entries carry; entries
    at or before the tally's last id of their arm are skipped (counted already).
    """
    queues: dict[str, Queue] = {}
    before: dict[str, Queue] = {}
    counts = _Counts(tally)
    lasts = {CURRENT: tally.last_current, SHADOW: tally.last_shadow}
    for arm, entries in ((CURRENT, current), (SHADOW, shadow)):
        for entry_id, run in fresh_entries(entries, lasts[arm]):
            lasts[arm] = entry_id
            if not run.key:
                continue
            if run.key not in queues:
                queue = waiting.get(run.key)
                if queue is not None and queue.runs:
                    before[run.key] = queue
                queues[run.key] = queue if queue is not None else Queue(arm)
            queue = queues[run.key]
            mine = Waiting(entry_id, run.passed, run.tools)
            if queue.arm == arm or not queue.runs:
                queues[run.key] = Queue(arm, (*queue.runs, mine) if queue.arm == arm else (mine,))
                continue
            mate, rest = queue.runs[0], queue.runs[1:]
            queues[run.key] = Queue(queue.arm, rest)
            if arm == CURRENT:
                counts.pair(run.key, mate.id, mine, mate)
            else:
                counts.pair(run.key, entry_id, mate, mine)
    changed = {key: queue for key, queue in queues.items()
               if queue != before.get(key, Queue(queue.arm))}
    moved = counts.tally(last_current=lasts[CURRENT], last_shadow=lasts[SHADOW])
    return Step(moved, changed, {k: before[k] for k in changed if k in before})


class _Counts:
    """The running counts while a batch is folded in (mutable; `tally()` freezes them)."""

    def __init__(self, start: Tally) -> None:
        self.start = start
        self.pairs, self.both_pass, self.both_fail = start.pairs, start.both_pass, start.both_fail
        self.regressions, self.improvements = start.regressions, start.improvements
        self.trajectory = dict(start.trajectory)
        self.regressed: list[Listed] = []
        self.improved: list[Listed] = []
        self.blocking: list[Listed] = []
        self.blocking_n = start.blocking_n
        self.lost = set(start.lost)

    def pair(self, key: str, shadow_id: str, current: Waiting, shadow: Waiting) -> None:
        """Count one pair: flips or agreement, its trajectory change, a lost required tool."""
        self.pairs += 1
        was, now = current.passed, shadow.passed
        if was and not now:
            self.regressions += 1
            self.regressed.append(Listed(shadow_id, key))
        elif now and not was:
            self.improvements += 1
            self.improved.append(Listed(shadow_id, key))
        elif now:
            self.both_pass += 1
        else:
            self.both_fail += 1
        change = classify(current.tools, shadow.tools).value
        self.trajectory[change] = self.trajectory.get(change, 0) + 1
        gone = lost_tools(current.tools, shadow.tools, self.start.required)
        if gone:
            self.blocking_n += 1
            self.lost.update(gone)
            self.blocking.append(Listed(shadow_id, key, tuple(gone)))

    def tally(self, *, last_current: str, last_shadow: str) -> Tally:
        """The tally with this batch counted."""
        start = self.start
        return replace(
            start, pairs=self.pairs, both_pass=self.both_pass, both_fail=self.both_fail,
            regressions=self.regressions, improvements=self.improvements,
            trajectory=self.trajectory, regressed=_first(start.regressed, self.regressed),
            improved=_first(start.improved, self.improved),
            blocking=_first(start.blocking, self.blocking), blocking_n=self.blocking_n,
            lost=tuple(sorted(self.lost)), last_current=last_current, last_shadow=last_shadow)


def _first(kept: Sequence[Listed], new: Sequence[Listed]) -> tuple[Listed, ...]:
    """The first MAX_LISTED_KEYS of both by shadow stream id (a pair may form late)."""
    if not new and len(kept) <= MAX_LISTED_KEYS:
        return tuple(kept)
    merged = sorted((*kept, *new), key=lambda item: stream_order(item.id))
    return tuple(merged[:MAX_LISTED_KEYS])
