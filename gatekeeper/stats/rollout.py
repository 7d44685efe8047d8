"""One rollout's evidence across its stages: the always-valid tests run over all its runs.

A rollout is a candidate's walk beside one current config, from the live stage
it entered (normally shadow) through each canary step and full, until it is
stable or rolled back. Each stage keeps its own window (`stage_since` is its
epoch), so a test that restarted at each stage would throw away what shadow,
10% and 50% saw at every promotion, and a small drop would need more runs than
any one stage holds. Here each sequential test runs over the whole rollout:

- the failure-rate test against current's p0 and the pass-rate floor test, over
  every candidate run of the rollout (shadow's, each canary step's, full's);
- the sequential McNemar test over shadow's flips and, once shadow is over, its
  evidence carried on by the failure-rate test over the runs after shadow
  (an e-value at a stopping time times a test martingale on later runs).

Each is a nonnegative supermartingale over the rollout while the candidate is
healthy, and so is their average with weights fixed when the rollout began, so
by Ville's inequality the average ever reaches 1 / x with chance at most x over
the whole rollout, read at every tick of every stage. That is why its level is
the rollout's: `rollout_alpha` = alpha times the ladder's stages, the sum of
the stage alphas it replaces (the CUSUM and the one-look tests stay per stage).

Which stages belong to the rollout comes from the binding history
(`walk`, newest entry first): the run of entries with the same current and
candidate in a live stage. A rollback or a promotion to stable ends a rollout,
so a candidate that comes back after a rollback starts a new one.

Pure: history entries and counts in, data out (`gatekeeper.store.rollout` reads them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bindings.models import Binding, HistoryEntry, Stage, Thresholds, VersionedBinding
from gatekeeper.stats.budget import CONCURRENT, FLIPS, FLOOR, RATE, Combined, combine, weights
from gatekeeper.stats.concurrent import Comparison
from gatekeeper.stats.sequential import log_ratio, rate_log_ratio

LIVE_STAGES = frozenset({Stage.SHADOW, Stage.CANARY, Stage.FULL})
#: The most a rollout's alpha may be, whatever the stage alpha and the ladder.
MAX_ROLLOUT_ALPHA = 0.5


def ladder_stages(binding: Binding) -> int:
    """The stages of the binding's ladder: shadow, each canary step under 1, and full."""
    return 2 + sum(1 for share in binding.step_shares if share < 1.0)


def rollout_alpha(binding: Binding) -> float:
    """The level of the rollout-wide sequential tests: the stage alpha times the stages."""
    return min(MAX_ROLLOUT_ALPHA, binding.gate.thresholds.alpha * ladder_stages(binding))


def epoch_key(since: float | None) -> str:
    """A stage's window epoch (as `trace_keys.epoch_of` writes it) from its start."""
    return "0" if since is None else f"{since:.6f}"


@dataclass(frozen=True)
class Walk:
    """The rollout the current stage belongs to, as the history shows it."""

    #: When the rollout entered its first live stage, and which stage that was.
    began: Stage
    since: float | None
    #: Its earlier stages' bindings, oldest first (the current stage left out).
    earlier: tuple[Binding, ...]
    #: False when the lookback ran out before the rollout's first stage was found.
    complete: bool


def walk(record: VersionedBinding, newest_first: Iterable[HistoryEntry]) -> Walk | None:
    """The rollout `record`'s stage belongs to; None when no rollout is live.

    `newest_first` is the role's history, newest entry first (it may be cut:
    then `complete` is False). Entries newer than `record` are skipped: the
    history may have moved on since the binding was read.
    """
    binding = record.binding
    if binding.candidate is None or binding.stage not in LIVE_STAGES:
        return None
    arms = (binding.current, binding.candidate)
    here = epoch_key(binding.stage_since)
    first = binding
    seen = {here}
    earlier: list[Binding] = []
    for entry in newest_first:
        if entry.version > record.version:
            continue
        older = entry.binding
        if older.stage not in LIVE_STAGES or (older.current, older.candidate) != arms:
            return Walk(first.stage, first.stage_since, tuple(reversed(earlier)), True)
        first = older
        epoch = epoch_key(older.stage_since)
        if epoch not in seen:
            seen.add(epoch)
            earlier.append(older)
        if entry.version == 1:
            break
    else:
        # The lookback ran out before the rollout's first stage (or the history's first entry).
        return Walk(first.stage, first.stage_since, tuple(reversed(earlier)), False)
    return Walk(first.stage, first.stage_since, tuple(reversed(earlier)), True)


@dataclass(frozen=True)
class EarlierStage:
    """One finished stage of the rollout: the candidate's counts in it (and shadow's flips)."""

    stage: Stage
    share: float
    since: float | None
    n: int = 0
    passes: int = 0
    regressions: int = 0
    improvements: int = 0
    #: The candidate's run failures against concurrent current's over the stage's cells.
    concurrent: Comparison = field(default_factory=Comparison)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for the gate view's `rollout.stages`."""
        out: dict[str, Any] = {"stage": self.stage.value, "share": self.share,
                               "since": self.since, "epoch": epoch_key(self.since),
                               "n": self.n, "passes": self.passes,
                               "concurrent": self.concurrent.as_dict()}
        if self.stage is Stage.SHADOW:
            out["flips"] = {"pass_to_fail": self.regressions, "fail_to_pass": self.improvements}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EarlierStage:
        """Read one back out of the view's JSON."""
        flips = data.get("flips") or {}
        since = data.get("since")
        return cls(stage=Stage(data["stage"]), share=float(data.get("share", 0.0)),
                   since=None if since is None else float(since),
                   n=int(data.get("n", 0)), passes=int(data.get("passes", 0)),
                   regressions=int(flips.get("pass_to_fail", 0)),
                   improvements=int(flips.get("fail_to_pass", 0)),
                   concurrent=Comparison.from_dict(data.get("concurrent")))


@dataclass(frozen=True)
class Carried:
    """What the rollout's earlier stages hand the current one."""

    began: Stage
    since: float | None = None
    stages: tuple[EarlierStage, ...] = ()
    complete: bool = True

    @property
    def n(self) -> int:
        """Candidate runs in the earlier stages."""
        return sum(s.n for s in self.stages)

    @property
    def passes(self) -> int:
        """Of which passed."""
        return sum(s.passes for s in self.stages)

    @property
    def flips(self) -> tuple[int, int]:
        """(pass->fail, fail->pass) over the earlier shadow stages."""
        shadows = [s for s in self.stages if s.stage is Stage.SHADOW]
        return sum(s.regressions for s in shadows), sum(s.improvements for s in shadows)

    @property
    def live(self) -> tuple[int, int]:
        """(runs, passes) of the earlier stages after shadow (canary steps and full)."""
        after = [s for s in self.stages if s.stage is not Stage.SHADOW]
        return sum(s.n for s in after), sum(s.passes for s in after)

    @property
    def concurrent(self) -> Comparison:
        """The earlier stages' concurrent comparisons after shadow (canary steps and full)."""
        total = Comparison()
        for s in self.stages:
            if s.stage is not Stage.SHADOW:
                total = total.merge(s.concurrent)
        return total

    @property
    def compared(self) -> Comparison:
        """Every earlier stage's concurrent comparison, shadow's unpaired cells included."""
        total = Comparison()
        for s in self.stages:
            total = total.merge(s.concurrent)
        return total

    def as_dict(self, binding: Binding) -> dict[str, Any]:
        """The gate view's `rollout` section for `binding`'s current stage."""
        regressions, improvements = self.flips
        return {"began": self.began.value, "since": self.since, "complete": self.complete,
                "alpha": rollout_alpha(binding), "stages": [s.as_dict() for s in self.stages],
                "carried": {"n": self.n, "passes": self.passes,
                            "flips": {"pass_to_fail": regressions,
                                      "fail_to_pass": improvements}}}

    @classmethod
    def from_view(cls, section: Mapping[str, Any] | None) -> Carried | None:
        """Read the view's `rollout` section; None when the view has none (an older router)."""
        if not isinstance(section, Mapping) or "began" not in section:
            return None
        since = section.get("since")
        return cls(began=Stage(section["began"]), since=None if since is None else float(since),
                   stages=tuple(EarlierStage.from_dict(s) for s in section.get("stages", ())),
                   complete=bool(section.get("complete", False)))


def carried_of(found: Walk, counts: Iterable[EarlierStage]) -> Carried:
    """The walk and each earlier stage's counts (in the walk's order), as one record."""
    return Carried(found.began, found.since, tuple(counts), found.complete)


@dataclass(frozen=True)
class StageCounts:
    """The current stage's candidate figures the sequential tests read."""

    stage: Stage
    n: int
    passes: int
    #: Shadow's (pass->fail, fail->pass) flips in this stage; None outside shadow.
    flips: tuple[int, int] | None = None
    #: This stage's closed cells against concurrent current (run failures); None: the
    #: view has no `concurrent` section (an older router), and the rate test against
    #: current's p0 runs instead.
    concurrent: Comparison | None = None


def sequential_logs(now: StageCounts, carried: Carried | None, p0: float | None,
                    floor: float | None) -> dict[str, float]:
    """ln of each sequential test's e-value, over the rollout (or the stage alone without
    `carried`): the candidate against concurrent current and shadow's flips carried on by
    it; from a view without the concurrent section, rate against p0, the floor and the
    flips carried on by the rate test."""
    before = carried or Carried(began=now.stage)
    if now.concurrent is not None:
        return concurrent_logs(now, before)
    total_n, total_passes = before.n + now.n, before.passes + now.passes
    failures = total_n - total_passes
    logs: dict[str, float] = {}
    if p0 is not None:
        logs[RATE] = rate_log_ratio(failures, total_n, p0)
    if floor is not None:
        logs[FLOOR] = rate_log_ratio(failures, total_n, floor)
    if before.began is Stage.SHADOW or now.stage is Stage.SHADOW:
        regressions, improvements = before.flips
        if now.flips is not None:
            regressions, improvements = regressions + now.flips[0], improvements + now.flips[1]
        logs[FLIPS] = log_ratio(regressions, improvements)
        live_n, live_passes = before.live
        if now.stage is not Stage.SHADOW:
            live_n, live_passes = live_n + now.n, live_passes + now.passes
        if p0 is not None and live_n:
            logs[FLIPS] += rate_log_ratio(live_n - live_passes, live_n, p0)
    return logs


def concurrent_logs(now: StageCounts, before: Carried) -> dict[str, float]:
    """The concurrent tests' logs: the comparison over every stage of the rollout (shadow's
    cells too: there both arms ran the same jobs, and comparing them unpaired is
    conservative when the arms' outcomes on a job go together), and in a rollout that
    began in shadow the flips' e-value carried on by the comparison after shadow."""
    after = before.concurrent
    every = before.compared
    if now.concurrent is not None:
        every = every.merge(now.concurrent)
        if now.stage is not Stage.SHADOW:
            after = after.merge(now.concurrent)
    logs = {CONCURRENT: every.log_e()}
    if before.began is Stage.SHADOW or now.stage is Stage.SHADOW:
        regressions, improvements = before.flips
        if now.flips is not None:
            regressions, improvements = regressions + now.flips[0], improvements + now.flips[1]
        logs[FLIPS] = log_ratio(regressions, improvements) + after.log_e()
    return logs


def rollout_evidence(binding: Binding, now: StageCounts, carried: Carried | None,
                     p0: float | None) -> Combined:
    """The rollout's sequential e-value against its level (`budget.combine`).

    With `carried` (the gate view found the rollout's stages) the tests run over
    the whole rollout at `rollout_alpha`, weighted as the stage the rollout began
    in weights them; without it, or when the history was cut before the
    rollout's start, over this stage alone at the stage alpha, as before.
    """
    thresholds: Thresholds = binding.gate.thresholds
    floor = 1.0 - thresholds.min_pass_rate
    has_floor = 0.0 < floor < 1.0
    whole = carried is not None and carried.complete
    logs = sequential_logs(now, carried if whole else None, p0, floor if has_floor else None)
    began = carried.began if whole and carried is not None else now.stage
    level = rollout_alpha(binding) if whole else thresholds.alpha
    return combine(logs, weights(began, floor=has_floor, concurrent=now.concurrent is not None),
                   level)
