"""The gate view's `units` section: the unit test over the rollout's live stages.

Reads each canary/full stage's unit hashes of both arms (`gatekeeper.store.unit_events`)
in one pipeline, each arm's distinct units (PFCOUNT, a call of its own: Redis
Cluster's client refuses it in a pipeline), and the rollout's slow/costly limits; the first view that finds current with
`LIMIT_RUNS` runs in a live stage fixes the limits (HSETNX: once per rollout,
whoever comes first, never moved after). Then `gatekeeper.stats.units.unit_test`.

`units`: null when no rollout is in a live stage, else `rollout`, `stretches`
(since, share of each live stage), `arms` (runs, units, p99 report lag),
`limits` (slow_ms, costly_micros or null) and `test` (`UnitVerdict.as_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.stats.units import Stretch, lag_quantile, unit_test
from gatekeeper.store.gated_criteria import config_criteria, gated
from gatekeeper.store.unit_events import (
    UNIT_STAGES,
    epoch_units_key,
    hll_key,
    limits_key,
    merge_arm_units,
    parse_epoch_units,
    rollout_id,
)
from gatekeeper.view.context import GateContext
from gatekeeper.view_model import RolloutView
from gatekeeper.view_model.units import (
    StretchView,
    UnitArmView,
    UnitLimitsView,
    UnitsView,
    UnitTestView,
)

#: Current's runs in a live stage before the slow/costly limits are fixed.
LIMIT_RUNS = 100
#: The quantile of current's latency and cost the limits sit at.
LIMIT_QUANTILE = 0.9
ARMS = ("candidate", "current")


def stretches_of(ctx: GateContext, rollout: RolloutView | None) -> list[tuple[Stretch, str]]:
    """Each live stage of the rollout so far, oldest first, with its window epoch."""
    out: list[tuple[Stretch, str]] = []
    for stage in rollout.stages if rollout is not None else ():
        if stage.stage in UNIT_STAGES and stage.since is not None:
            out.append((Stretch(float(stage.since), float(stage.share)), stage.epoch))
    binding = ctx.record.binding
    if binding.stage in UNIT_STAGES and binding.stage_since is not None:
        out.append((Stretch(float(binding.stage_since), float(binding.share)), ctx.epoch))
    return out


def _quantile(histogram: Mapping[float, int], q: float) -> float:
    """The `q` quantile of a histogram {bucket upper bound: count} (its bucket's bound)."""
    total, seen = sum(histogram.values()), 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= q * total:
            return value
    return max(histogram)


def _fixed_limits(ctx: GateContext, key: str, found: Mapping[bytes, bytes]) -> dict[str, int]:
    """The rollout's limits, fixing them now if current has run enough in this stage."""
    limits = {k.decode(): int(v) for k, v in found.items()}
    if limits or ctx.record.binding.stage not in UNIT_STAGES:
        return limits
    window = ctx.arms["current"][1]
    if window.n < LIMIT_RUNS:
        return limits
    wanted: dict[str, int] = {}
    latency = window.latency_histogram()
    if sum(latency.values()) >= LIMIT_RUNS:
        wanted["slow_ms"] = round(_quantile(latency, LIMIT_QUANTILE) * 1000)
    cost = window.cost_histogram()
    if sum(cost.values()) >= LIMIT_RUNS and any(value > 0 for value in cost):
        wanted["costly_micros"] = round(_quantile(cost, LIMIT_QUANTILE) * 1_000_000)
    if not wanted:
        return limits
    # From the next whole second: runs started before it were never checked against them.
    wanted["from_s"] = int(ctx.now) + 1
    connection = ctx.traces.connection
    pipe = connection.pipeline(transaction=False)
    for name, value in wanted.items():
        pipe.hsetnx(key, name, value)
    pipe.expire(key, 7 * 86400)
    pipe.hgetall(key)
    return {k.decode(): int(v) for k, v in pipe.execute()[-1].items()}


def units_section(ctx: GateContext, rollout: RolloutView | None) -> UnitsView | None:
    """The `units` section of the gate view built from `ctx` (and its `rollout` section)."""
    binding = ctx.record.binding
    rollout_name = rollout_id(binding)
    stretches = stretches_of(ctx, rollout)
    if rollout_name is None or not stretches:
        return None
    connection = ctx.traces.connection
    pipe = connection.pipeline(transaction=False)
    for _, epoch in stretches:
        for arm in ARMS:
            pipe.hgetall(epoch_units_key(ctx.role, epoch, arm))
    limits_name = limits_key(ctx.role, rollout_name)
    pipe.hgetall(limits_name)
    raw = pipe.execute()
    units = {arm: int(connection.pfcount(hll_key(ctx.role, rollout_name, arm))) for arm in ARMS}
    parts: dict[str, list[Any]] = {arm: [] for arm in ARMS}
    for index, found in enumerate(raw[:-1]):
        parts[ARMS[index % 2]].append(parse_epoch_units(found))
    arms = {arm: merge_arm_units(parts[arm], units[arm]) for arm in ARMS}
    limits = _fixed_limits(ctx, limits_name, raw[-1])
    # The weights follow the candidate's spec, fixed before any event (`weights_for`).
    criteria = tuple(c.key for c in gated(config_criteria(connection, binding.candidate or ""),
                                           binding))
    verdict = unit_test(arms["candidate"], arms["current"], [s for s, _ in stretches],
                        ctx.now, binding.gate.thresholds.alpha, criteria)
    return UnitsView.model_construct(
        rollout=rollout_name,
        stretches=[StretchView.model_construct(since=s.since, share=s.share)
                   for s, _ in stretches],
        arms={arm: UnitArmView.model_construct(runs=a.runs, units=a.units,
                                               lag_p99_s=lag_quantile(a.lags))
              for arm, a in arms.items()},
        limits=UnitLimitsView.model_construct(slow_ms=limits.get("slow_ms"),
                                              costly_micros=limits.get("costly_micros"),
                                              from_s=limits.get("from_s")),
        test=UnitTestView.model_validate(verdict.as_dict()),
        reason=verdict.reason() if verdict.reject else None)
