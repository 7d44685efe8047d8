"""The tripwire: a zero-tolerance breach in a candidate or shadow run rolls the role back now.

Called by the ingest request that carried the breach, not at a later gatekeeper
tick. It re-reads the binding from the store (not a worker's cached copy), rolls
back through the stage machine with actor `tripwire`, and retries a compare-and-set
it lost; if someone else already rolled back (or moved to another candidate),
there is nothing left to do and that is fine. Losing every retry raises Conflict.
"""

from __future__ import annotations

from dataclasses import dataclass

from bindings.errors import Conflict
from bindings.models import Stage, VersionedBinding
from bindings.store import BindingStore
from gatekeeper.checks.invariants import TraceVerdict
from gatekeeper.machine.stages import Event, apply
from rolegate.trace import Trace

ACTOR = "tripwire"
ARMS = frozenset({"candidate", "shadow"})
LIVE = frozenset({Stage.SHADOW, Stage.CANARY, Stage.FULL})
ATTEMPTS = 3


@dataclass(frozen=True)
class Trip:
    """A tripwire that fired: the run that breached and the record it wrote."""

    run_id: str
    tools: tuple[str, ...]
    required_lost: tuple[str, ...]
    record: VersionedBinding


def applies(trace: Trace, verdict: TraceVerdict) -> bool:
    """True when `trace` is a candidate or shadow run with a zero-tolerance breach."""
    return verdict.blocking and trace.arm in ARMS


def _live_for(record: VersionedBinding, config: str) -> bool:
    binding = record.binding
    return binding.candidate == config and binding.stage in LIVE


def trip(store: BindingStore, trace: Trace, verdict: TraceVerdict, now: float) -> Trip | None:
    """Roll the role back for this breaching trace; None when nothing was left to roll back."""
    for attempt in range(ATTEMPTS):
        record = store.get(trace.role)
        if not _live_for(record, trace.config):
            return None
        move = apply(record.binding, Event.ROLLBACK, now)
        what = ", ".join(verdict.forbidden) or "none"
        lost = ", ".join(verdict.required_lost) or "none"
        details = {
            "summary": move.summary,
            "run_id": trace.run_id,
            "arm": trace.arm,
            "config": trace.config,
            "tool": verdict.forbidden[0] if verdict.forbidden else None,
            "tools": list(verdict.forbidden),
            "required_lost": list(verdict.required_lost),
        }
        try:
            written = store.write(
                trace.role, move.binding, expected_version=record.version, actor=ACTOR,
                action="rollback",
                reason=f"tripwire: run {trace.run_id} ({trace.arm}) called forbidden "
                       f"tools [{what}], lost required tools [{lost}]",
                details=details,
            )
        except Conflict:
            if attempt + 1 == ATTEMPTS:
                # Still losing: let the ingest answer 409 so the client retries;
                # the retry finds the run stored in this stage and trips again.
                raise
            continue  # someone wrote in between: read again and decide again
        return Trip(trace.run_id, verdict.forbidden, verdict.required_lost, written)
    return None  # pragma: no cover - the loop returns or raises
