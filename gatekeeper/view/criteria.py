"""The gate view's "by_criterion" section: pass rates per criterion key and per config, online.

For each arm, the newest traces since the stage began (at most `SAMPLE` of them)
are scored against the arm config's stored criteria (from its spec), beside the
online invariants' own criterion verdicts (`gatekeeper.view.scored`, which keeps
them scored between views). Candidate and shadow are then read
against current criterion by criterion: paired by job key where both arms ran
the same jobs (shadow), so a lost call shows as "12 cases lost the
verifyIdentity call"; otherwise as a drop in rate whose 95% interval lies wholly
below zero.

`gate` is the per-key evidence decide() gates on (`gatekeeper.stats.criteria_gate`):
for each arm against current, every deterministic criterion's counts (paired flips
where the arms share jobs), its mode from the role's `gate.criteria` and its test.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.checks.criteria import Criterion
from gatekeeper.checks.review import Tally, describe_loss, paired_flips, regressions, tally
from gatekeeper.stats.criteria_gate import KeyCounts, criteria_tests
from gatekeeper.stats.statistics import difference_interval
from gatekeeper.store.configs import ConfigStore
from gatekeeper.view.context import GateContext
from gatekeeper.view.scored import SAMPLE, scored_runs


def criteria_section(ctx: GateContext, configs: ConfigStore) -> dict[str, Any]:
    """Per arm: the config, traces scored and each criterion's tally; then regressions by key.

    When no arm's config has a spec, the invariants' criterion counts come from
    the window aggregates the gate already read, and no trace is re-read.
    """
    # Candidate and shadow run one config: each config's record read once.
    named = dict.fromkeys(config for config, _ in ctx.arms.values())
    records = {config: configs.find(config) for config in named}
    if not any(records.values()):
        return _from_aggregates(ctx)
    arms: dict[str, Any] = {}
    by_arm: dict[str, dict[str, dict[str, bool | None]]] = {}
    rates: dict[str, dict[str, Tally]] = {}
    known: dict[str, Criterion] = {}
    scored = scored_runs(ctx.traces, ctx.role, ctx.record.binding.stage_since,
                         [(config, arm, records[config]) for arm, (config, _) in ctx.arms.items()])
    for (arm, (config, _)), stored in zip(ctx.arms.items(), scored):
        record = records[config]
        known.update({c.key: c for c in (record.criteria if record is not None else ())})
        # Keyed by job key so shadow and current runs of one job pair up.
        by_arm[arm] = dict(stored)
        rates[arm] = tally(by_arm[arm].values())
        arms[arm] = {"config": config, "spec": record is not None, "n": len(stored),
                     "criteria": {k: t.as_dict() for k, t in rates[arm].items()}}
    found: dict[str, Any] = {}
    gate: dict[str, Any] = {}
    for arm in arms:
        if arm == "current" or not by_arm[arm]:
            continue
        paired = by_arm["current"].keys() & by_arm[arm].keys()
        if paired:
            losses = regressions(by_arm["current"], by_arm[arm], known.values())
            found[arm] = [{**r.as_dict(), "paired": True} for r in losses]
        else:
            found[arm] = _rate_drops(rates["current"], rates[arm])
        gate[arm] = gate_counts(known, rates["current"], rates[arm],
                                paired_flips(by_arm["current"], by_arm[arm]) if paired else None)
    return {"sample": SAMPLE, "arms": arms,
            "descriptions": {k: c.description for k, c in sorted(known.items())},
            "regressions": found, "gate": gate_section(ctx, gate)}


def gate_counts(known: dict[str, Criterion], current: dict[str, Tally], arm: dict[str, Tally],
                flips: dict[str, tuple[int, int]] | None) -> list[KeyCounts]:
    """Per deterministic criterion key: the arm's and current's counts, and paired flips."""
    out = []
    for key, criterion in sorted(known.items()):
        if not criterion.deterministic:
            continue  # judge criteria are counted from the judges' verdicts
        mine, theirs = arm.get(key, Tally()), current.get(key, Tally())
        lost, gained = (None, None) if flips is None else flips.get(key, (0, 0))
        message = describe_loss(key, lost, criterion) if lost else ""
        out.append(KeyCounts(key, mine.passed, mine.failed, theirs.passed, theirs.failed,
                             lost, gained, "spec", message))
    return out


def gate_section(ctx: GateContext, counts: dict[str, list[KeyCounts]]) -> dict[str, Any]:
    """The `gate` part of by_criterion: per arm, each key's counts, mode and test."""
    gate = ctx.record.binding.gate
    return {arm: [v.as_dict() for v in criteria_tests(keys, gate.criteria,
                                                      gate.thresholds.alpha)]
            for arm, keys in counts.items()}


def _from_aggregates(ctx: GateContext) -> dict[str, Any]:
    """The invariants' criteria per arm from the stage's running aggregates (no spec anywhere)."""
    rates = {arm: {key: Tally(passed=passes, failed=n - passes)
                   for key, (passes, n) in window.criterion_counts().items()}
             for arm, (_, window) in ctx.arms.items()}
    arms = {arm: {"config": config, "spec": False, "n": window.n,
                  "criteria": {k: t.as_dict() for k, t in rates[arm].items()}}
            for arm, (config, window) in ctx.arms.items()}
    found = {arm: _rate_drops(rates["current"], rates[arm])
             for arm in arms if arm != "current" and arms[arm]["n"]}
    return {"sample": None, "arms": arms, "descriptions": {}, "regressions": found, "gate": {}}


def _rate_drops(current: dict[str, Tally], other: dict[str, Tally]) -> list[dict[str, Any]]:
    """Criteria whose rate fell with the 95% interval of the difference wholly below zero."""
    out = []
    for key in sorted(current.keys() & other.keys()):
        a, b = other[key], current[key]
        if not a.n or not b.n:
            continue
        diff, low, high = difference_interval(a.passed, a.n, b.passed, b.n)
        if high < 0:
            out.append({"key": key, "difference": diff, "low": low, "high": high,
                        "paired": False,
                        "message": f"{key}: {a.rate:.0%} of {a.n} against {b.rate:.0%} "
                                   f"of {b.n} on current"})
    return sorted(out, key=lambda r: r["difference"])
