"""The gate view's sections about before and after: `previous` and `next`.

- `previous`: for a rolled-back role, the evidence of the stage the rollback
  ended. The new stage's window starts empty; the failing numbers live in the
  window of the stage before, kept under that stage's epoch, and are read back
  from there, with the rollback's history entry.
- `next`: what the gatekeeper does next, by `gatekeeper.machine.next_step` (decide() on
  the view's own evidence, explained), with who paused the role and why.
"""

from __future__ import annotations

import itertools
from typing import Any

from bindings.models import Stage, VersionedBinding
from bindings.store import BindingStore
from gatekeeper.machine.next_step import next_section
from gatekeeper.store.traces import TraceStore
from gatekeeper.view.arms import arms_section, comparison_section
from gatekeeper.view.context import context_of
from gatekeeper.view_model import GateView, NextView

#: History entries read back to find the rollback, or who paused a paused role.
LOOKBACK = 50


def previous_section(store: BindingStore, traces: TraceStore, record: VersionedBinding,
                     now: float) -> dict[str, Any] | None:
    """For a rolled-back role: the ended stage's arms and numbers, and the rollback entry."""
    if record.binding.stage is not Stage.ROLLED_BACK:
        return None
    entries = store.history(record.role, limit=LOOKBACK)
    # Newest first: the rollback is the newest entry in rolled_back whose elder was not
    # (pauses, resumes and edits after it keep the stage rolled_back).
    found = next(((newer, older) for newer, older in itertools.pairwise(entries)
                  if newer.binding.stage is Stage.ROLLED_BACK
                  and older.binding.stage is not Stage.ROLLED_BACK), None)
    if found is None:
        return None
    ended, before = found
    old = VersionedBinding(role=record.role, version=before.version, binding=before.binding,
                           updated_at=before.time, updated_by=before.actor)
    ctx = context_of(old, traces, now)
    return {
        "version": old.version,
        "stage": old.binding.stage.value,
        "share": old.binding.share,
        "window": {"since": old.binding.stage_since, "until": ended.time, "epoch": ctx.epoch},
        "rollback": {"version": ended.version, "time": ended.time, "actor": ended.actor,
                     "action": ended.action, "reason": ended.reason, "details": ended.details},
        "arms": arms_section(ctx),
        "comparison": comparison_section(ctx),
    }


def paused_by(store: BindingStore, record: VersionedBinding) -> tuple[str, str] | None:
    """(actor, reason) of the pause that holds the role, when it is paused."""
    if not record.binding.paused:
        return None
    # The pause is nearly always among the newest entries; a bounded read keeps it cheap.
    for entry in store.history(record.role, limit=LOOKBACK):
        if entry.action == "pause":
            return entry.actor, entry.reason
    return None


def next_view_section(store: BindingStore, record: VersionedBinding, view: GateView,
                      now: float) -> NextView:
    """The `next` section of `view` (every other section already in it)."""
    return next_section(record, view, now, paused_by=paused_by(store, record))
