"""The gate view's "judges" section, and the judged criteria added to "by_criterion".

When the role's gate names a judge: its settings (never a credential), the UTC
day's counters (queued, skipped because the queue was full or the budget
spent, calls, tokens, judged, errors, the last error), the budget left, and per
arm the verdicts of each judge criterion over the stage. The judged criteria
then join `by_criterion`: their tallies beside the deterministic ones, and their
counts in its `gate` lists, so decide() gates them like any criterion key
(`gatekeeper.stats.criteria_gate`: gated, blocking or observed), all keys
sharing the criteria's alpha. A judge that is down or answers garbage only
leaves its counts where they were: it never fails a stage by itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gatekeeper.checks.review import Tally
from gatekeeper.stats.criteria_gate import KeyCounts, criteria_tests
from gatekeeper.stats.pairwise_gate import pairwise_failure, pairwise_test
from gatekeeper.store.judge_pairs import PairStore
from gatekeeper.store.judging import JudgeStore
from gatekeeper.view.context import GateContext


def judges_section(ctx: GateContext, store: JudgeStore) -> dict[str, Any] | None:
    """The judge's settings, the day's spend and counters, and per-arm verdict counts."""
    binding = ctx.record.binding
    policy = binding.gate.judge
    if policy is None:
        return None
    day = store.day(ctx.role, ctx.now)
    exhausted = [what for what, spent, limit in (
        ("calls", day["calls"], policy.max_calls_per_day),
        ("tokens", day["tokens"], policy.max_tokens_per_day)) if spent >= limit]
    counts = store.counts(ctx.role, ctx.epoch)
    section: dict[str, Any] = {
        "url": policy.url, "model": policy.model,
        "rates": {arm: policy.rate(arm, binding.stage.value) for arm in ctx.arms},
        "day": day,
        "budget": {"calls": policy.max_calls_per_day, "tokens": policy.max_tokens_per_day,
                   "exhausted": exhausted,
                   "message": (f"the day's judge budget is spent ({', '.join(exhausted)}): "
                               "sampling stopped until 00:00 UTC") if exhausted else None},
        "arms": {arm: {key: {"passed": p, "failed": f} for key, (p, f) in sorted(keys.items())}
                 for arm, keys in sorted(counts.items())},
        "min_judged": policy.min_judged,
        "wait": None,
        "agreement": store.agreement(ctx.role),
        "min_agreement": policy.min_agreement,
        "min_agreement_runs": policy.min_agreement_runs,
    }
    if policy.min_judged is not None:
        section["wait"] = _judged_wait(ctx, section, policy.min_judged)
    if policy.pairwise:
        counts_ = PairStore(store.connection).counts(ctx.role, ctx.epoch)
        alpha = binding.gate.thresholds.alpha
        section["pairwise"] = {"rate": policy.pairwise, **counts_,
                               "safety_criteria": list(policy.safety_criteria),
                               "test": pairwise_test(counts_, alpha),
                               "failure": pairwise_failure(counts_, alpha, policy.model)}
    return section


def merge_pairwise(paired: dict[str, Any] | None, judges: dict[str, Any] | None,
                   ctx: GateContext) -> dict[str, Any] | None:
    """The shadow paired report, failed (blocking) when the pairwise judge fails the candidate.

    decide() fails a stage at once on a blocking failed paired report, as on a
    pair that lost a required tool, naming the reason: the pairwise test is
    valid at every look (`gatekeeper.stats.pairwise_gate`), so it need not wait.
    """
    failure = ((judges or {}).get("pairwise") or {}).get("failure")
    if failure is None or ctx.record.binding.stage.value != "shadow":
        return paired
    out = dict(paired or {"pairs": 0})
    return {**out, "verdict": "fail", "blocking": True,
            "reasons": [*out.get("reasons", []), failure]}


def _judged_wait(ctx: GateContext, section: dict[str, Any], need: int) -> str | None:
    """Why promotion waits for judged evidence on the judged arm, or None."""
    judged = "shadow" if ctx.record.binding.stage.value == "shadow" else "candidate"
    keys = section["arms"].get(judged, {})
    if not keys:
        have, short = 0, "judged runs"
    else:
        key, have = min(((k, v["passed"] + v["failed"]) for k, v in keys.items()),
                        key=lambda kv: kv[1])
        short = key
    if have >= need:
        return None
    text = f"waiting for judged evidence: {short} {have} of min_judged {need}"
    if section["budget"]["message"]:
        text += f"; {section['budget']['message']}"
    return text


def merge_judged(by_criterion: dict[str, Any], judges: dict[str, Any] | None,
                 ctx: GateContext) -> None:
    """Add the judged criteria's tallies and counts to `by_criterion`, tests recomputed."""
    if judges is None or not judges["arms"]:
        return
    descriptions = by_criterion.get("descriptions") or {}
    judged_keys = {key for keys in judges["arms"].values() for key in keys}
    for arm, keys in judges["arms"].items():
        figures = (by_criterion.get("arms") or {}).get(arm)
        if figures is not None:
            for key, c in keys.items():
                figures["criteria"][key] = {**Tally(c["passed"], c["failed"]).as_dict(),
                                            "source": "judge"}
    current = judges["arms"].get("current", {})
    gate = ctx.record.binding.gate
    lists = by_criterion.setdefault("gate", {})
    for arm in ctx.arms:
        if arm == "current":
            continue
        mine = judges["arms"].get(arm, {})
        spec = [KeyCounts.from_dict(k) for k in lists.get(arm, [])
                if k.get("key") not in judged_keys]
        judged = []
        for key in sorted(judged_keys):
            a, b = mine.get(key, {}), current.get(key, {})
            if not a and not b:
                continue
            judged.append(KeyCounts(key, a.get("passed", 0), a.get("failed", 0),
                                    b.get("passed", 0), b.get("failed", 0), source="judge",
                                    message=_message(key, a, b, descriptions)))
        if not judged and arm not in lists:
            continue
        _, held = trusted_modes(judges, gate.criteria, judged_keys)
        judged = [dataclasses.replace(c, held=held.get(c.key, "")) for c in judged]
        lists[arm] = [v.as_dict() for v in criteria_tests([*spec, *judged], gate.criteria,
                                                          gate.thresholds.alpha)]


def trusted_modes(judges: dict[str, Any], modes: Mapping[str, str],
                  keys: set[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The criteria modes with each judged key the judge is not yet trusted on made observed.

    Trusted: its agreement with the humans' feedback on the key (else with itself,
    asked twice) reaches `min_agreement` over at least `min_agreement_runs` runs.
    Returns (modes, key -> why it is held at observed).
    """
    need = judges.get("min_agreement")
    if need is None:
        return dict(modes), {}
    runs = judges.get("min_agreement_runs") or 1
    out, held = dict(modes), {}
    for key in keys:
        figures = next((judges["agreement"].get(source, {}).get(key)
                        for source in ("human", "self")
                        if (judges["agreement"].get(source, {}).get(key) or {}).get("n", 0)
                        >= runs), None)
        rate = None if figures is None else figures["rate"]
        if rate is None or rate < need:
            out[key] = "observed"
            held[key] = (f"observed until the judge agrees on it {need:.0%} of the time "
                         f"over {runs} runs (" + ("too few labelled or repeated runs"
                                                  if rate is None else f"now {rate:.0%}")
                         + ")")
    return out, held


def _message(key: str, mine: dict[str, int], current: dict[str, int],
             descriptions: dict[str, str]) -> str:
    n = mine.get("passed", 0) + mine.get("failed", 0)
    m = current.get("passed", 0) + current.get("failed", 0)
    return (f"judged: failed {mine.get('failed', 0)} of {n} runs against "
            f"{current.get('failed', 0)} of {m} on current")
