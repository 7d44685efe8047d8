"""The rollout's evidence carried across its stages (gatekeeper.stats.rollout): pure, no I/O."""

from __future__ import annotations

import math
import random

import pytest

from bindings.models import Binding, GatePolicy, HistoryEntry, Stage, Thresholds, VersionedBinding
from gatekeeper.machine.decide import Action, Evidence, decide
from gatekeeper.stats.budget import FLIPS, FLOOR, RATE, SEQUENTIAL_SHARE
from gatekeeper.stats.rollout import (
    Carried,
    EarlierStage,
    StageCounts,
    ladder_stages,
    rollout_alpha,
    rollout_evidence,
    sequential_logs,
    walk,
)
from gatekeeper.stats.sequential import log_ratio, rate_log_ratio

POLICY = GatePolicy(thresholds=Thresholds(min_samples=50, min_stage_seconds=600,
                                          bake_seconds=3600))
SHARES = {Stage.SHADOW: 0.0, Stage.CANARY: 0.1, Stage.FULL: 1.0, Stage.STABLE: 0.0,
          Stage.ROLLED_BACK: 0.0}


def _binding(stage: Stage, since: float, *, share: float | None = None,
             candidate: str | None = "cfg-b", current: str = "cfg-a") -> Binding:
    return Binding(current=current, candidate=candidate, stage=stage,
                   share=SHARES[stage] if share is None else share, gate=POLICY,
                   stage_since=since)


def _history(*bindings: Binding) -> tuple[VersionedBinding, list[HistoryEntry]]:
    """The record of the last binding and the history that led to it, newest first."""
    entries = [HistoryEntry(role="r", version=i + 1, time=float(i), actor="t", action="x",
                            reason="", binding=b) for i, b in enumerate(bindings)]
    last = entries[-1]
    record = VersionedBinding(role="r", version=last.version, binding=last.binding,
                              updated_at=last.time, updated_by="t")
    return record, list(reversed(entries))


def test_walk_finds_the_earlier_stages_of_the_rollout_oldest_first() -> None:
    """stable -> shadow -> canary 0.1 -> (pause, resume) -> canary 0.5: two earlier stages."""
    shadow, step1 = _binding(Stage.SHADOW, 10.0), _binding(Stage.CANARY, 20.0)
    paused = step1.with_changes(paused=True)
    record, entries = _history(_binding(Stage.STABLE, 1.0, candidate=None), shadow, step1,
                               paused, step1, _binding(Stage.CANARY, 30.0, share=0.5))
    found = walk(record, entries)
    assert found is not None and found.complete
    assert (found.began, found.since) == (Stage.SHADOW, 10.0)
    assert [(b.stage, b.stage_since) for b in found.earlier] == [
        (Stage.SHADOW, 10.0), (Stage.CANARY, 20.0)]


def test_a_rollback_ends_the_rollout_so_re_entry_starts_a_new_one() -> None:
    """Shadow, canary, rolled back, shadow again: the new shadow carries nothing from before."""
    record, entries = _history(
        _binding(Stage.STABLE, 1.0, candidate=None), _binding(Stage.SHADOW, 10.0),
        _binding(Stage.CANARY, 20.0), _binding(Stage.ROLLED_BACK, 30.0),
        _binding(Stage.SHADOW, 40.0), _binding(Stage.CANARY, 50.0))
    found = walk(record, entries)
    assert found is not None and found.complete
    assert [b.stage_since for b in found.earlier] == [40.0]
    assert found.since == 40.0


def test_another_candidate_or_a_stable_role_is_another_rollout() -> None:
    """A new candidate starts its own rollout; a role with no live rollout has none."""
    record, entries = _history(_binding(Stage.SHADOW, 10.0, candidate="cfg-c"),
                               _binding(Stage.SHADOW, 20.0), _binding(Stage.CANARY, 30.0))
    found = walk(record, entries)
    assert found is not None and [b.stage_since for b in found.earlier] == [20.0]
    stable, entries = _history(_binding(Stage.STABLE, 1.0, candidate=None))
    assert walk(stable, entries) is None


def test_entries_newer_than_the_record_are_skipped_and_a_cut_history_is_incomplete() -> None:
    """The binding read before a move: the move is not part of it. A cut lookback says so."""
    record, entries = _history(_binding(Stage.STABLE, 1.0, candidate=None),
                               _binding(Stage.SHADOW, 10.0), _binding(Stage.CANARY, 20.0))
    older = VersionedBinding(role="r", version=2, binding=entries[1].binding, updated_at=1.0,
                             updated_by="t")
    found = walk(older, entries)
    assert found is not None and found.earlier == () and found.complete
    cut = walk(record, entries[:2])
    assert cut is not None and not cut.complete
    whole = walk(record, entries)
    assert whole is not None and whole.complete


def test_a_role_created_in_a_live_stage_began_there() -> None:
    """Version 1 already in canary: the rollout began in canary, and the walk is complete."""
    record, entries = _history(_binding(Stage.CANARY, 10.0), _binding(Stage.FULL, 20.0))
    found = walk(record, entries)
    assert found is not None and found.complete and found.began is Stage.CANARY


def test_the_rollout_alpha_is_the_stage_alpha_times_the_ladder() -> None:
    """Default ladder (shadow, 0.1, 0.5, full): 4 stages, 0.0025 each, 1% per rollout."""
    binding = _binding(Stage.SHADOW, 1.0)
    assert ladder_stages(binding) == 4
    assert math.isclose(rollout_alpha(binding), 0.01)
    longer = binding.with_changes(steps=(0.01, 0.05, 0.25, 0.5))
    assert ladder_stages(longer) == 6


def test_each_test_runs_over_every_candidate_run_of_the_rollout() -> None:
    """Rate and floor over shadow + canary counts; flips carried on by the rate after shadow."""
    carried = Carried(Stage.SHADOW, 10.0, (
        EarlierStage(Stage.SHADOW, 0.0, 10.0, n=600, passes=540, regressions=40,
                     improvements=20),
        EarlierStage(Stage.CANARY, 0.1, 20.0, n=60, passes=52)))
    now = StageCounts(Stage.CANARY, n=300, passes=265)
    logs = sequential_logs(now, carried, p0=0.06, floor=0.1)
    assert math.isclose(logs[RATE], rate_log_ratio(960 - 857, 960, 0.06))
    assert math.isclose(logs[FLOOR], rate_log_ratio(960 - 857, 960, 0.1))
    assert math.isclose(logs[FLIPS], log_ratio(40, 20) + rate_log_ratio(360 - 317, 360, 0.06))
    alone = sequential_logs(now, None, p0=0.06, floor=0.1)
    assert set(alone) == {RATE, FLOOR}
    assert math.isclose(alone[RATE], rate_log_ratio(35, 300, 0.06))


def _record(stage: Stage) -> VersionedBinding:
    return VersionedBinding(role="r", version=5, binding=_binding(stage, 1_000.0),
                            updated_at=1_000.0, updated_by="t")


def test_a_drop_no_stage_can_see_alone_is_rolled_back_over_the_rollout() -> None:
    """0.90 against 0.95 in stages of 200 runs: no stage alone rejects, the rollout does."""
    record = _record(Stage.FULL)
    stages = [EarlierStage(Stage.SHADOW, 0.0, 1.0, n=200, passes=180),
              EarlierStage(Stage.CANARY, 0.1, 2.0, n=200, passes=180),
              EarlierStage(Stage.CANARY, 0.5, 3.0, n=200, passes=180)]
    kept = dict(verdict="pass", n=200, passes=180, current_n=0, current_passes=0,
                baseline_failure=0.051, baseline_bounded=True)
    each = [rollout_evidence(record.binding, StageCounts(s.stage, s.n, s.passes), None, 0.051)
            for s in stages]
    assert not any(c.reject for c in each)
    alone = decide("r", record, Evidence(**kept), 1_100.0)
    assert alone.action is Action.HOLD
    carried = Carried(Stage.SHADOW, 1.0, tuple(stages))
    decision = decide("r", record, Evidence(**kept, carried=carried), 1_100.0)
    assert decision.action is Action.ROLLBACK, decision.reason
    assert "80 of 800 candidate runs of the rollout" in decision.reason
    assert decision.details["sequential"]["alpha"] == rollout_alpha(record.binding)


def test_without_the_rollout_or_with_a_cut_one_the_stage_alpha_applies() -> None:
    """An older router's view (no section) or a cut history: this stage alone, stage alpha."""
    binding = _binding(Stage.CANARY, 1_000.0)
    now = StageCounts(Stage.CANARY, n=100, passes=90)
    cut = Carried(Stage.SHADOW, 1.0, (EarlierStage(Stage.SHADOW, 0.0, 1.0, n=900,
                                                   passes=800),), complete=False)
    for carried in (None, cut):
        combined = rollout_evidence(binding, now, carried, 0.06)
        assert combined.alpha == binding.gate.thresholds.alpha
        assert math.isclose(combined.threshold,
                            math.log(1 / (SEQUENTIAL_SHARE * binding.gate.thresholds.alpha)))
        assert combined.logs[RATE] == rate_log_ratio(10, 100, 0.06)


def test_the_view_section_round_trips() -> None:
    """Carried.as_dict is what the view shows; Carried.from_view reads it back unchanged."""
    binding = _binding(Stage.CANARY, 30.0)
    carried = Carried(Stage.SHADOW, 10.0, (
        EarlierStage(Stage.SHADOW, 0.0, 10.0, n=10, passes=9, regressions=2, improvements=1),
        EarlierStage(Stage.CANARY, 0.1, 20.0, n=5, passes=5)))
    section = carried.as_dict(binding)
    assert section["carried"] == {"n": 15, "passes": 14,
                                  "flips": {"pass_to_fail": 2, "fail_to_pass": 1}}
    assert section["stages"][0]["epoch"] == "10.000000"
    assert Carried.from_view(section) == carried
    assert Carried.from_view(None) is None and Carried.from_view({}) is None


@pytest.mark.slow
def test_the_carried_e_process_keeps_its_level_over_a_healthy_rollout() -> None:
    """Healthy candidates read after every run through four stages: crossings <= the level.

    At a generous level (alpha 0.05 a stage, 0.2 a rollout) so that 400 rollouts
    measure it: the rollout-wide e-value ever crosses in at most its 0.8 share.
    """
    policy = GatePolicy(thresholds=Thresholds(alpha=0.05, min_pass_rate=0.5))
    binding = Binding(current="cfg-a", candidate="cfg-b", stage=Stage.FULL, share=1.0,
                      gate=policy, stage_since=4.0)
    rng = random.Random(11)
    crossed = 0
    for _ in range(400):
        stages: list[EarlierStage] = []
        hit = False
        for index, (stage, runs) in enumerate([(Stage.SHADOW, 150), (Stage.CANARY, 30),
                                               (Stage.CANARY, 150), (Stage.FULL, 300)]):
            carried = Carried(Stage.SHADOW, 1.0, tuple(stages))
            n = passes = regressions = improvements = 0
            for _ in range(runs):
                ok = rng.random() < 0.9
                n, passes = n + 1, passes + ok
                if stage is Stage.SHADOW:
                    ok_current = rng.random() < 0.9
                    regressions += ok_current and not ok
                    improvements += ok and not ok_current
                flips = (regressions, improvements) if stage is Stage.SHADOW else None
                counts = StageCounts(stage, n, passes, flips)
                if rollout_evidence(binding, counts, carried, 0.1).reject:
                    hit = True
                    break
            if hit:
                break
            stages.append(EarlierStage(stage, 0.0, float(index), n, passes, regressions,
                                       improvements))
        crossed += hit
    assert crossed / 400 <= SEQUENTIAL_SHARE * rollout_alpha(binding)
