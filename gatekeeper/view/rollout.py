"""The gate view's `rollout` section: the earlier stages of the rollout the stage belongs to.

The gatekeeper's sequential tests run over every candidate run of the rollout
(`gatekeeper.stats.rollout`); this section is where they read the earlier stages'
counts from: `began` and `since` (the rollout's first stage and when it
began), `complete` (false when the history was cut before it), `alpha` (the
rollout's level), `stages` (each earlier stage, oldest first: stage, share,
since, epoch, the candidate's n and passes, and shadow's flips) and `carried`
(their sums). Null when no rollout is live.
"""

from __future__ import annotations

from bindings.store import BindingStore
from gatekeeper.store.rollout import RolloutReader
from gatekeeper.view.context import GateContext
from gatekeeper.view_model import RolloutView


def rollout_section(store: BindingStore, ctx: GateContext) -> RolloutView | None:
    """The `rollout` section of the gate view built from `ctx`."""
    carried = RolloutReader(store, ctx.traces).carried(ctx.record)
    return None if carried is None else RolloutView.model_validate(
        carried.as_dict(ctx.record.binding))
