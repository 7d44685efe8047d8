"""The gate view's concurrent section as a fold: advanced bucket by bucket, it is the section
built from scratch, to the bit (the simulator keeps the fold; the router folds at once)."""

from __future__ import annotations

import random

from bindings.models import Binding, GatePolicy, Stage
from gatekeeper.stats.concurrent import Comparison, CusumState, cells_of, closed_before, cusum
from gatekeeper.view.concurrent import METRICS, Folded, closing, section_of
from gatekeeper.window import CELL_EVENTS, CELL_N, WindowStats


def _windows(rng: random.Random, buckets: int,
             worse: bool = False) -> tuple[WindowStats, WindowStats]:
    """Two arms' stage windows with random cells (some strata one arm alone ran, some
    buckets empty, event rates from none to a third; `worse`: the candidate's far higher)."""
    arms = (WindowStats(), WindowStats())
    for arm, window in enumerate(arms):
        for bucket in range(buckets):
            for stratum in ("", "rule") if rng.random() < 0.3 else ("",):
                if rng.random() < 0.1:
                    continue
                n = rng.randint(1, 40)
                cell = f"{bucket}:{stratum}"
                window.fields[CELL_N + cell] = n
                rate = rng.choice((0.3, 0.6) if worse and arm == 0 else (0.0, 0.01, 0.05, 0.3))
                for prefix in CELL_EVENTS.values():
                    events = sum(rng.random() < rate for _ in range(n))
                    if events:
                        window.fields[prefix + cell] = events
    return arms


def _binding(stage: Stage) -> Binding:
    share = {Stage.SHADOW: 0.0, Stage.CANARY: 0.1, Stage.FULL: 1.0}[stage]
    return Binding(current="a", candidate="b", stage=stage, share=share, gate=GatePolicy(),
                   stage_since=0.0)


def test_the_fold_advanced_bucket_by_bucket_is_the_section_from_scratch() -> None:
    """At every read time, a fold advanced one closed bucket at a time equals section_of's."""
    rng = random.Random(11)
    alarms = 0
    for trial in range(24):
        candidate, current = _windows(rng, 40, worse=trial % 2 == 1)
        binding = _binding((Stage.SHADOW, Stage.CANARY, Stage.FULL)[trial % 3])
        cand, cur = candidate.all_cells(), current.all_cells()
        folded = Folded.start(binding)
        for now in range(0, 45 * 30, 11):
            before = closed_before(now)
            if before != folded.before:
                fresh = {m: [c for c in cells_of(cand[m], cur[m], before=before)
                             if c.bucket >= folded.before] for m in METRICS}
                folded = folded.advance(fresh, before)
            horizon = closing(candidate, current, now).as_dict()
            assert folded.section(binding, horizon=horizon) == section_of(
                candidate, current, binding, now)
        alarms += bool(folded.section(binding)["alarms"])
    assert alarms >= 5  # the CUSUMs did fire: the comparison covered alarms too


def test_comparison_and_cusum_folded_in_parts_equal_one_pass() -> None:
    """Comparison.fold and CusumState.fold over whole buckets in parts give `of` and `cusum`."""
    rng = random.Random(12)
    for _ in range(30):
        candidate, current = _windows(rng, 30)
        cells = cells_of(candidate.cells("run_failure"), current.cells("run_failure"))
        cut = rng.randint(0, 30)
        first = [c for c in cells if c.bucket < cut]
        rest = [c for c in cells if c.bucket >= cut]
        assert Comparison().fold(first).fold(rest) == Comparison.of(cells)
        state = CusumState(0.0, 6.0, 0, None)
        assert state.fold(first).fold(rest) == cusum(cells, 6.0)
