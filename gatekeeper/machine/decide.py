"""One role, one tick: advance, roll back, hold, or leave it alone. Pure.

The rule, in order (the first that applies wins):

1. no live rollout (no candidate, or stable / rolled back) or a paused role: skip;
2. a zero-tolerance gate reason (a forbidden call with `max_forbidden_rate` 0,
   a lost required tool; in shadow a pair that lost a required tool; a failed
   criterion the policy marks blocking) fails it at once, at any n: roll back;
2b. the unit test (`gatekeeper.stats.units`: which arm the units that went
   wrong belong to, against the share) rejects the candidate: roll back. When
   units carry several runs each, rules 3, 4 and 6 only hold (`machine.by_unit`);
3. a CUSUM alarms on the candidate (against current over the same cells,
   `gatekeeper.stats.concurrent`; from an older view, against current's p0): roll back;
4. the rollout's sequential evidence reaches its share of alpha: roll back. One
   e-value, the weighted average of the comparison with concurrent current and
   the sequential McNemar test over the shadow flips carried on by it (from an
   older view: the failure-rate test against current's p0, the flips and the
   pass-rate floor test; `budget`), each over every candidate run since the rollout began (the view's
   `rollout` section carries the earlier stages, `gatekeeper.stats.rollout`): valid
   however often it is read, so it is read at every tick from the first run,
   before `min_samples` (a candidate failing half its runs is rolled back within
   a few dozen); then each gated criterion key's own sequential test, candidate
   against current, at its share of alpha (`gatekeeper.stats.criteria_gate`):
   roll back naming the key;
5. hold: too few traces (`min_samples`; in shadow `min_shadow_pairs` pairs), the
   stage has not lasted its minimum (`gatekeeper.machine.durations`: min_stage_seconds, a
   step's own min_seconds, full: bake_seconds), the rollout's runs could not yet have
   caught the regression `gate.power` names (`gatekeeper.machine.power_hold`), or the
   pass rate is under
   `min_pass_rate` but the floor test has not excluded it yet (each written once,
   `gatekeeper.machine.holds`: decide() holds on the first and returns what they
   all wait for as `Decision.waits`); past the stage deadline a hold takes
   `deadline_action` (`gatekeeper.machine.deadline`). `min_samples` guards
   promotion, never rollback;
6. the stage's one look (this tick advances or rolls back, so it is taken once
   per stage, never on each tick of a hold): a rated gate reason (p95 steps,
   mean cost, a non-zero forbidden-rate limit), the exact McNemar test in shadow
   or the unpaired comparison with current at their share of alpha: roll back;
7. otherwise: advance one step.

Only tests valid under repeated looks (rules 3-4) act before the stage's end;
the fixed-sample ones (rule 6) are read exactly once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bindings.models import Binding, Stage, Thresholds, VersionedBinding
from gatekeeper.machine.by_unit import repeats_hold, unit_details, unit_rejection
from gatekeeper.machine.deadline import overdue
from gatekeeper.machine.details import DecisionDetails
from gatekeeper.machine.durations import stage_minimum
from gatekeeper.machine.evidence import Evidence as Evidence  # re-exported for decide's callers
from gatekeeper.machine.evidence import evidence_from_view as evidence_from_view
from gatekeeper.machine.holds import (
    Hold,
    Wait,
    holds,
    other_wait,
    waits_shown,
)
from gatekeeper.machine.holds import shadow_pairs_needed as shadow_pairs_needed
from gatekeeper.machine.matched import (
    candidate_alarms,
    concurrent_of,
    concurrent_reason,
    matched,
    missing_words,
)
from gatekeeper.machine.reports import report_decision
from gatekeeper.machine.responses import HELD, HOLD, WARN, Responder, response_details
from gatekeeper.machine.stage_end import mcnemar_worse, worse_than_current
from gatekeeper.machine.stages import destination
from gatekeeper.machine.vocabulary import Action as Action  # re-exported for decide's callers
from gatekeeper.stats.budget import CONCURRENT, FLIPS, FLOOR, RATE, Combined, final_alpha
from gatekeeper.stats.criteria_gate import KeyVerdict, acting, criteria_tests
from gatekeeper.stats.rollout import LIVE_STAGES, StageCounts, rollout_evidence
from gatekeeper.stats.sequential import upper_p0
from gatekeeper.view_model.paired import PairedView


@dataclass(frozen=True)
class Decision:
    """The gatekeeper's answer for one role: the action, why, and the numbers behind it."""

    role: str
    action: Action
    version: int
    stage: str
    reason: str
    #: The figures behind it (`machine.details`): typed; its JSON is what history keeps.
    details: DecisionDetails = field(default_factory=DecisionDetails)
    #: Alerts to raise whatever the action (a drifting stable current).
    alerts: tuple[str, ...] = ()
    #: What a hold (or a paused stage) waits for, in decide()'s order (`machine.holds`):
    #: what the gate view's `next`, `rolegate status` and the dashboard show.
    waits: tuple[Wait, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for --dry-run output and webhook events."""
        return {"role": self.role, "action": self.action.value, "version": self.version,
                "stage": self.stage, "reason": self.reason, "details": self.details.as_json(),
                "alerts": list(self.alerts)}


def required_seconds(binding: Binding) -> float:
    """How long the binding's current stage must last before it may advance."""
    return stage_minimum(binding).seconds


def decide(role: str, record: VersionedBinding, evidence: Evidence, now: float) -> Decision:
    """Decide what to do with `role` at `now`, given its binding and the gate's evidence."""
    binding = record.binding
    thresholds = binding.gate.thresholds
    alerts = tuple(f"drift on current {binding.current}: {m}" for m in evidence.current_alarms)
    numbers = _numbers(evidence)

    responder = Responder(binding.gate.responses,
                          forbidden="forbidden_rate" in evidence.reason_codes
                          and thresholds.max_forbidden_rate == 0)

    found: list[tuple[Hold, ...]] = []  # the stage's holds, found once when first asked for

    def stage_holds() -> tuple[Hold, ...]:
        if not found:
            found.append(holds(binding, evidence, under_floor(rated), now))
        return found[0]

    def make(action: Action, reason: str, *, waits: tuple[Wait, ...] | None = None,
             **extra: Any) -> Decision:
        """The Decision; a hold waits for the stage's holds (`reason` alone when none is
        left: a report-rate or unit-test hold) unless `waits` says otherwise."""
        if waits is None:
            waits = () if action is not Action.HOLD else (
                waits_shown(stage_holds()) or (other_wait(reason),))
        warned = {"warnings": list(responder.warnings)} if responder.warnings else {}
        return Decision(role, action, record.version, binding.stage.value, reason,
                        DecisionDetails.model_validate({**numbers, **warned, **extra}), alerts,
                        waits)

    def fail(rule: str, reason: str, keys: Iterable[str] = (),
             **extra: Any) -> Decision | None:
        """Roll back, hold or (None) only warn, as gate.responses says for `rule` (and the
        criterion `keys` it names)."""
        applied, source = responder.response(rule, keys)
        if applied != WARN and (held := repeats_hold(evidence.units, rule, reason)):
            # A plain hold (no pause): the unit test keeps reading and decides.
            return make(Action.HOLD, held, held_by_units=rule, **extra)
        if applied == WARN:
            responder.warn(rule, source, reason)
            return None
        details = {**response_details(rule, applied, source), **extra}
        if applied == HOLD:  # paused for a human: nothing to wait for but them
            return make(Action.HOLD, f"{HELD} ({source}): {reason}", waits=(), **details)
        return make(Action.ROLLBACK, reason, **details)

    if binding.candidate is None or binding.stage not in LIVE_STAGES:
        return make(Action.SKIP, f"no rollout in progress (stage {binding.stage.value})")
    blocking, rated = split_reasons(evidence, thresholds)
    if binding.paused:  # what it would wait for once resumed
        return make(Action.SKIP, "paused by an operator", waits=waits_shown(stage_holds()))
    by_key = criterion_verdicts(binding, evidence)
    zero, rejected = acting(by_key)
    blocking += [v.reason() for v in zero]
    if blocking and (failed := fail("gate", "gate failed: " + "; ".join(blocking),
                                    [v.counts.key for v in zero], gate_reasons=list(blocking),
                                    **_criteria_details(zero))):
        return failed
    if (rejected_units := unit_rejection(evidence.units)) and (failed := fail(
            "units", rejected_units, **unit_details(evidence.units))):
        return failed
    alarms, what = candidate_alarms(evidence)
    if alarms and (failed := fail("drift", f"{what} on candidate {binding.candidate}: "
                                  + ", ".join(alarms), drift_alarms=alarms)):
        return failed
    paired = evidence.paired if binding.stage is Stage.SHADOW else None
    # A pair that lost a required tool fails at once; so does a failing report that
    # does not say why (no McNemar figures). A McNemar failure waits for the look.
    if paired is not None and paired.verdict == "fail" and (
            paired.blocking or paired.mcnemar is None) and (failed := fail(
                "shadow", "shadow comparison failed: " + "; ".join(paired.reasons))):
        return failed
    combined = sequential_evidence(binding, evidence)
    if combined.reject and (failed := fail(
            "sequential", _rejected(combined, evidence, paired),
            sequential={**combined.as_dict(), "p0": rate_p0(evidence)})):
        return failed
    if rejected and (failed := fail("criteria", "; ".join(v.reason() for v in rejected),
                                    [v.counts.key for v in rejected], **_criteria_details(rejected))):
        return failed
    # After every test that rolls back: a report-rate hold (both_short) never hides one.
    if reported := report_decision(evidence.reports, fail, functools.partial(make, Action.HOLD)):
        return reported  # type: ignore[no-any-return]
    if held := stage_holds():
        reason, extra = held[0].reason, held[0].details
        # A stage that cannot decide ends (`gatekeeper.machine.deadline`): a deadline
        # hold pauses for a human, as a held rule does.
        if (ended := overdue(binding, now, reason)) is not None:
            return make(Action.HOLD if ended.hold else Action.ROLLBACK, ended.reason, waits=(),
                        sequential=combined.as_dict(), **ended.details, **extra)
        return make(Action.HOLD, reason, sequential=combined.as_dict(), **extra)
    # The stage's one look at the fixed-sample tests: this tick advances or rolls back.
    elapsed = now - (binding.stage_since if binding.stage_since is not None else now)
    late = [r for code, r in rated if code != "pass_rate"]
    if late and (failed := fail("stage_end", "gate failed at the stage's end: "
                                + "; ".join(late), gate_reasons=late)):
        return failed
    level = final_alpha(thresholds.alpha, binding.stage)
    if paired is not None:
        worse_paired = mcnemar_worse(paired, level)
        if worse_paired is not None and (failed := fail("mcnemar", worse_paired)):
            return failed
    worse = worse_than_current(matched(evidence), level)
    if worse is not None and (counted := missing_words(evidence)):
        worse = f"{worse}, {counted}"
    if worse is not None and (failed := fail("vs_current", worse)):
        return failed
    if binding.needs_approval() and binding.approved is None:
        # The gate passed; the step asks a human before it is left (rollback never waits).
        return make(Action.HOLD, f"{AWAITING_APPROVAL}: the gate passed on {evidence.n} traces; "
                    f"an operator approves with `rolegate approve {role} --reason ...`",
                    waits=(approval_wait(role, binding, now),), awaiting_approval=True,
                    elapsed_s=round(elapsed, 3), sequential=combined.as_dict())
    return make(Action.ADVANCE, f"gate passed on {evidence.n} traces after {elapsed:.0f}s",
                elapsed_s=round(elapsed, 3), sequential=combined.as_dict())


#: How a hold for a step's approval starts its reason (next_step, the loop and pages key on it).
AWAITING_APPROVAL = "awaiting approval"


def approval_wait(role: str, binding: Binding, now: float) -> Wait:
    """The one wait of a step the gate passed that asks a human first."""
    return Wait("approval", None, 0, 1,
                f"awaits an operator's approval to advance to {destination(binding, now)}: "
                f"the gate passed; `rolegate approve {role} --reason ...` or the page's "
                f"Approve button")


def under_floor(rated: list[tuple[str, str]]) -> str | None:
    """The gate's pass-rate reason, when the pass rate is under min_pass_rate."""
    return next((message for code, message in rated if code == "pass_rate"), None)


#: Reason codes that fail a stage at once, at any n (zero tolerance).
BLOCKING_CODES = frozenset({"required_tool_lost"})


def split_reasons(evidence: Evidence,
                  thresholds: Thresholds) -> tuple[list[str], list[tuple[str, str]]]:
    """The gate's reasons as (blocking messages, [(code, message)] of rated ones).

    Blocking: a lost required tool, forbidden calls under a zero limit, and any
    reason of a failing verdict whose code is unknown (the safe reading).
    """
    if evidence.verdict not in ("fail", "insufficient_data"):
        return [], []
    codes = evidence.reason_codes
    if len(codes) != len(evidence.reasons):
        return (list(evidence.reasons) if evidence.verdict == "fail" else []), []
    blocking: list[str] = []
    rated: list[tuple[str, str]] = []
    for code, message in zip(codes, evidence.reasons):
        if code in BLOCKING_CODES or (code == "forbidden_rate"
                                      and thresholds.max_forbidden_rate == 0):
            blocking.append(message)
        elif code != "min_samples":
            rated.append((code, message))
    return blocking, rated


def sequential_evidence(binding: Binding, evidence: Evidence) -> Combined:
    """The rollout's e-value: rate test, shadow flips and pass-rate floor, averaged over
    every candidate run of the rollout so far (`gatekeeper.stats.rollout`, `budget`)."""
    stage = binding.stage
    flips = None
    if stage is Stage.SHADOW and evidence.paired is not None:
        flips = (evidence.paired.regressions, evidence.paired.improvements)
    counts = StageCounts(stage, evidence.n, evidence.passes, flips, concurrent_of(evidence))
    return rollout_evidence(binding, counts, evidence.carried, rate_p0(evidence))


def criterion_verdicts(binding: Binding, evidence: Evidence) -> list[KeyVerdict]:
    """Each criterion key's test on the evidence, at the stage alpha (acting ones first)."""
    return criteria_tests(evidence.criteria, binding.gate.criteria,
                          binding.gate.thresholds.alpha)


def _criteria_details(verdicts: list[KeyVerdict]) -> dict[str, Any]:
    return {"criteria": [v.as_dict() for v in verdicts]} if verdicts else {}


def rate_p0(evidence: Evidence) -> float | None:
    """The failure rate the candidate is tested against: current's, at its upper bound."""
    base = evidence.baseline_failure
    if base is None or not 0.0 < base < 1.0:
        return None
    bounded = base if evidence.baseline_bounded else upper_p0(base, evidence.baseline_runs)
    return min(0.999, bounded)


def _rejected(combined: Combined, evidence: Evidence, paired: PairedView | None) -> str:
    lead = combined.leading()
    carried = evidence.carried if evidence.carried is not None and evidence.carried.complete \
        else None
    n, passes = evidence.n, evidence.passes
    regressions, improvements = (0, 0) if paired is None \
        else (paired.regressions, paired.improvements)
    if carried is not None:
        n, passes = n + carried.n, passes + carried.passes
        regressions, improvements = (regressions + carried.flips[0],
                                     improvements + carried.flips[1])
    runs = f"{n - passes} of {n} candidate runs" + (" of the rollout" if n != evidence.n else "")
    what = {CONCURRENT: concurrent_reason(evidence, carried),
            RATE: f"{runs} failed against current's p0",
            FLOOR: f"{runs} failed: the pass rate is under min_pass_rate",
            FLIPS: f"shadow flips {regressions} pass->fail vs {improvements} fail->pass"
                   + ("" if paired is not None else ", then the " + (
                       "comparison with concurrent current" if evidence.concurrent is not None
                       else "rate test") + " after shadow")}[lead]
    return (f"sequential evidence e^{combined.log_e:.2f} >= e^{combined.threshold:.2f} "
            f"(alpha {combined.alpha:g}), mostly {lead}: {what}")


def _numbers(evidence: Evidence) -> dict[str, Any]:
    out: dict[str, Any] = {"verdict": evidence.verdict, "n": evidence.n,
                           "passes": evidence.passes, "current_n": evidence.current_n,
                           "current_passes": evidence.current_passes}
    if evidence.paired is not None:
        out["paired"] = evidence.paired.recorded()
    out.update(evidence.figures)
    return out
