"""The gate view of one targeting rule: `GET /v1/roles/<role>/gate?rule=R`.

A trace records the rule that picked its arm (`Trace.rule`), so the runs one
rule routed can be folded into windows of their own and judged by the same gate:
a candidate that fails only for one tenant shows as such. These windows are
replayed from the arms' streams since the stage began (at most `MAX_REPLAY` runs
per arm), not kept running like the stage's own.
"""

from __future__ import annotations

from bindings.errors import NotFound
from bindings.store import BindingStore
from gatekeeper.store.trace_keys import epoch_of
from gatekeeper.store.traces import TraceStore
from gatekeeper.view.arms import arms_section, comparison_section
from gatekeeper.view.context import GateContext, arm_configs, view_header
from gatekeeper.view.sections import MAX_REPLAY
from gatekeeper.view_model import RuleView
from gatekeeper.view_model.arms import arms_view
from gatekeeper.view_model.comparison import comparison_view
from gatekeeper.window import WindowStats
from rolegate.routing import rule_id


def rule_view(store: BindingStore, traces: TraceStore, role: str, rule: str,
              now: float) -> RuleView:
    """The gate over the runs rule `rule` routed in the current stage; NotFound for no such rule."""
    record = store.get(role)
    binding = record.binding
    rules = {rule_id(r, index): r for index, r in enumerate(binding.rules)}
    if rule not in rules:
        raise NotFound(f"role {role!r} has no rule {rule!r}", role=role, rule=rule,
                       rules=sorted(rules))
    arms: dict[str, tuple[str, WindowStats]] = {}
    for arm, config in arm_configs(record).items():
        window = WindowStats()
        for stored in traces.read(role, config, arm, since=binding.stage_since,
                                  count=MAX_REPLAY):
            if stored.trace.rule == rule:
                window.add(stored.trace, stored.verdict)
        arms[arm] = (config, window)
    ctx = GateContext(role, record, epoch_of(binding), arms, traces, now)
    # `next` stays null: the gatekeeper decides on the whole stage, not on one rule's slice.
    return RuleView.model_construct(
        **view_header(ctx), rule={"id": rule, **rules[rule].model_dump(mode="json")},
        arms=arms_view(arms_section(ctx)), comparison=comparison_view(comparison_section(ctx)), next=None)
