"""The gate view of a simulated stage, and the gatekeeper reading it: literal or event-driven.

The view is built by `bench.sim_sections`, with the functions `gatekeeper.view`
builds it with; `decide.evidence_from_view` reads it and `decide.decide` judges it.

Two readers:

- **literal** (`literal_rule`): at every read the whole view is built afresh
  (the concurrent section by `section_of` from the cells written as window
  fields, exactly the router's path) and decide() is called. The reference.
- **event-driven** (`Reader`): decide() is a pure function of (binding,
  evidence, now), and within a stage the evidence can change the action only
  through `key`: the closed buckets (the concurrent section, with its CUSUMs
  and the stage-end look's matched counts, changes only when a bucket closes),
  shadow's flips (the flip test and the stage-end McNemar) and whether its pairs
  reached `min_shadow_pairs`, each arm's verdict class (decide reads an arm's
  verdict and reason codes; its counts only for text, since with the
  concurrent section the tests read the cells), the report check's matured
  buckets, the acting criterion keys, and the two clocks (the stage minimum,
  the deadline). So it calls decide() only when the key changed and otherwise
  answers what decide() answered last, which is what decide() would answer; an
  arm's JSON is built when its class changes. The concurrent section is kept as
  a fold (`view.concurrent.Folded`) advanced as buckets close. `tests/
  test_rollout_sim.py` holds the two readers to identical outcomes.

The key is only valid for a view with the concurrent section (the gate before
issue 23 read the arms' counts at every read): without it the reader is literal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from bench.sim_sections import (
    MAX_FLIP,
    cached_section,
    criteria_key,
    decision,
    kept_params,
    paired_report,
    verdict_class,
)
from bench.sim_state import StageCounts
from bindings.models import Stage, VersionedBinding
from gatekeeper.machine.deadline import deadline_of
from gatekeeper.machine.decide import (
    Action,
    Evidence,
    required_seconds,
    sequential_evidence,
    shadow_pairs_needed,
)
from gatekeeper.machine.power_hold import rollout_power
from gatekeeper.stats.budget import final_alpha
from gatekeeper.stats.concurrent import closed_before
from gatekeeper.stats.reports import mature_before
from gatekeeper.stats.rollout import Carried
from gatekeeper.view_model.paired import PairedView

#: A stand-in for decide(): given the binding, the stage counts and the time, an action.
Rule = Callable[[VersionedBinding, StageCounts, float], Action]


def gatekeeper_rule(record: VersionedBinding, counts: StageCounts, now: float) -> Action:
    """What the gatekeeper does: decide() on the evidence read out of the whole gate view,
    built afresh (the literal reader)."""
    return decision(record, counts, now).action


class plain_rule:  # a rule, called like the function it replaced (and picklable)
    """The plain check: roll back when the last `window` candidate runs pass under
    min_pass_rate; advance once the stage has min_samples runs and its time."""

    def __init__(self, window: int) -> None:
        self.window = window

    def __call__(self, record: VersionedBinding, counts: StageCounts, now: float) -> Action:
        binding = record.binding
        thresholds = binding.gate.thresholds
        window = self.window
        recent = list(counts.recent)[-window:]
        if len(recent) == window and sum(recent) / window < thresholds.min_pass_rate:
            return Action.ROLLBACK
        waited = now - (binding.stage_since or 0.0)
        if counts.cand_n >= thresholds.min_samples and waited >= required_seconds(binding):
            return Action.ADVANCE
        return Action.HOLD


class Reader:
    """The gatekeeper reading one stage: decide() on the view whenever `key` changed
    since the last read, else the answer it gave then (see the module docstring)."""

    def __init__(self, record: VersionedBinding, counts: StageCounts,
                 rule: Rule | None = None) -> None:
        binding = record.binding
        self.record, self.counts, self.rule = record, counts, rule
        self.policy = binding.gate
        self.since = binding.stage_since if binding.stage_since is not None else 0.0
        self.required = required_seconds(binding)
        found = deadline_of(binding, self.since)
        self.deadline = math.inf if found is None else found.at
        self.shadow = binding.stage is Stage.SHADOW
        self.needed = shadow_pairs_needed(binding.gate.thresholds)
        self.alpha = final_alpha(binding.gate.thresholds.alpha, Stage.SHADOW)
        #: Literal: a custom rule, or a view without the concurrent section.
        self.literal = rule is not None or not counts.concurrent or counts.literal
        #: The rollout section as decide() reads it back from the view.
        self.carried = None if counts.rollout is None else Carried.from_view(
            counts.rollout.as_dict(binding))
        self.summarized: tuple[Any, ...] | None = None
        #: Current's counts at the last read, and what they gave: whether the drift
        #: section shows a detector (and so a baseline), current's verdict class.
        self.current: tuple[int, int] | None = None
        self.baseline = False
        self.current_class = 0
        #: The judged arm's runs at the last read, and its verdict class.
        self.judged_n = -1
        self.judged = 0
        self.power_inputs: tuple[Any, ...] | None = None
        self.power = False
        self.summary: tuple[tuple[str, ...], bool] = ((), False)
        #: The rollout's e-value (ln) and threshold at the last summary.
        self.log_e, self.threshold = 0.0, math.inf
        self.last_key: tuple[Any, ...] | None = None
        self.last: tuple[Action, bool] = (Action.HOLD, False)
        self.decisions = 0
        #: The last decision's reason ("" for a rule's).
        self.reason = ""

    def key(self, now: float) -> tuple[Any, ...]:
        """Everything decide()'s action on this stage's view can depend on at `now`.

        While the stage is held (its minimum not reached, too few runs or pairs, the
        pass rate under the floor) decide() can only hold it or roll it back, and
        the concurrent section and the flips act only through the CUSUM alarms and
        whether the sequential evidence rejects (`concurrent_summary`); once nothing
        holds it, the closed buckets, the flips and the power hold (`powered`, which moves
        with every pair and every current run) are in the key. The
        section changes only when a bucket closes or (runs missing) a report bucket
        matures.
        """
        c, policy = self.counts, self.policy
        current = (c.cur_n, c.cur_passes)
        if current != self.current:
            # The view restarts its drift detector at a read when outdated; between current
            # runs its inputs stand still, and so does its answer.
            self.current = current
            self.baseline = kept_params(c, policy) is not None
            self.current_class = verdict_class(c.cur_n, c.cur_passes, policy)
        if c.cand_n != self.judged_n:
            self.judged_n = c.cand_n
            self.judged = verdict_class(c.cand_n, c.cand_passes, policy)
        judged = self.judged
        before = closed_before(now)
        flips = (c.regressions, c.improvements) if self.shadow else None
        time_ok = now - self.since >= self.required
        pairs_ok = not self.shadow or c.pairs >= self.needed
        held = not time_ok or judged != 2 or not pairs_ok
        mature = (None if c.reports is None
                  else mature_before(now, self.policy.reports.grace_seconds))
        if (before, mature, flips) != self.summarized and not self.still_short(before, mature,
                                                                              flips):
            self.summary = self.concurrent_summary(now)
            self.summarized = (before, mature, flips)
        return (held, time_ok, now >= self.deadline, judged, self.current_class, pairs_ok,
                self.summary, mature,
                criteria_key(c, self.record) if c.criteria is not None else None,
                None if held else self.free(now, before, flips))

    def free(self, now: float, before: int, flips: tuple[int, int] | None) -> tuple[Any, ...]:
        """The key's part once nothing but the power hold can hold the stage: while the
        power is short decide() holds (rollback aside), whatever the buckets and flips;
        once it is enough, decide() takes the stage's one look, which reads them."""
        if not self.powered(now):
            return (False,)
        return True, before, flips

    def powered(self, now: float) -> bool:
        """`_powered`, kept while its inputs hold: the section, the pairs and flips, the
        kept detector (outside shadow nothing of it moves with a run)."""
        c = self.counts
        cached_section(c, self.record, now)
        inputs = (c.cache["concurrent"][0], c.pairs, c.regressions, c.improvements,
                  self.baseline and c.detector is not None and c.detector.params)
        if inputs != self.power_inputs:
            self.power_inputs, self.power = inputs, self._powered(now)
        return self.power

    def _powered(self, now: float) -> bool:
        """True when the power hold lets the stage go: decide()'s `power_wait` (its
        `rollout_power`) on the section, the pairs and flips, and the baseline the drift
        section carries (p0, the rate observed and its reference: current's runs with its
        history; the detector's other figures do not enter)."""
        c = self.counts
        # The candidate's run_failure detector's p0, reference and observed rate: what
        # the section's detector serves (`Detector.as_dict`) and `machine.baseline` reads.
        found = c.detector.params if self.baseline and c.detector is not None else None
        paired = None
        if self.shadow:
            paired = PairedView.model_validate({
                "pairs": c.pairs, "flips": {"pass_to_fail": c.regressions,
                                            "fail_to_pass": c.improvements}})
        evidence = Evidence(verdict="pass", paired=paired, carried=self.carried,
                            concurrent=cached_section(c, self.record, now),
                            baseline_failure=None if found is None else found.p0,
                            baseline_runs=0 if found is None else found.reference,
                            baseline_observed=None if found is None else found.observed)
        power = rollout_power(self.record.binding, evidence)
        return power is None or power.enough

    def still_short(self, before: int, mature: int | None,
                    flips: tuple[int, int] | None) -> bool:
        """True when only shadow's flips moved since the last summary, which did not reject,
        and they cannot have brought the e-value to its threshold: each pass->fail flip
        raises the flips' log ratio by at most ln(2 max theta) (and the averaged e-value's
        log by no more), each fail->pass flip lowers it."""
        done = self.summarized
        if done is None or flips is None or self.summary[1] or done[:2] != (before, mature):
            return False
        regressions, improvements = flips
        was: tuple[int, int] = done[2]
        return (regressions >= was[0] and improvements >= was[1]
                and self.log_e + (regressions - was[0]) * MAX_FLIP < self.threshold)

    def concurrent_summary(self, now: float) -> tuple[tuple[str, ...], bool]:
        """(the metrics whose CUSUM alarms, whether the rollout's sequential evidence
        rejects) on the view's concurrent section at `now` and the flips so far, by
        decide()'s own `sequential_evidence` on the section the view shows."""
        c, binding = self.counts, self.record.binding
        section = cached_section(c, self.record, now)
        paired = None
        if self.shadow:
            paired = paired_report(c.pairs, c.regressions, c.improvements, self.alpha,
                                   self.needed)
        evidence = Evidence(verdict="pass", n=c.cand_n, passes=c.cand_passes, paired=paired,
                            carried=self.carried, concurrent=section)
        combined = sequential_evidence(binding, evidence)
        self.log_e, self.threshold = combined.log_e, combined.threshold
        return tuple(section.alarms), combined.reject

    def read(self, now: float) -> tuple[Action, bool]:
        """(the action at `now`, True when it is a hold past the deadline: the gatekeeper
        pauses the role)."""
        if self.rule is not None:
            return self.rule(self.record, self.counts, now), False
        if not self.literal:
            key = self.key(now)
            if key == self.last_key:
                return self.last
            self.last_key = key
        self.decisions += 1
        made = decision(self.record, self.counts, now, fast=not self.literal)
        self.reason = made.reason
        self.last = (made.action, made.action is Action.HOLD
                     and bool(made.details.deadline))
        return self.last
