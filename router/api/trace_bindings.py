"""The bindings one trace POST checks its traces against, and the refusal of a trace whose
config the role does not run (`config_not_bound`: it would count in no arm).

Used by `router.api.traces` (the Flask view, which trace JSON and OTLP pass through).
"""

from __future__ import annotations

from bindings.errors import NotFound
from bindings.models import VersionedBinding
from bindings.table_guard import trace_on_lost_role
from rolegate.trace import Trace
from router.app import Services

#: The refusal code of a trace whose config the role does not run.
NOT_BOUND = "config_not_bound"


class RequestBindings:
    """The bindings one request checks its traces against.

    The worker's copy first (no round trip); the binding in Redis for a role
    once that copy proved out of date: the store answered `Moved`, or a trace
    named a config the copy does not know (a candidate set a moment ago).
    """

    def __init__(self, services: Services) -> None:
        self.services = services
        self.seen: dict[str, VersionedBinding] = {}
        self.fresh: set[str] = set()

    def get(self, role: str) -> VersionedBinding:
        """The role's binding: this request's earlier read, the worker's copy, or the store."""
        record = self.seen.get(role)
        if record is not None:
            return record
        cached = None if role in self.fresh else self.services.cache.get(role)[0]
        # A role created a moment ago may not be in this worker's copy yet.
        record = cached if cached is not None else self._read(role)
        self.seen[role] = record
        return record

    def forget(self, role: str) -> None:
        """From now on, read the role's binding from Redis."""
        self.seen.pop(role, None)
        self.fresh.add(role)

    def reread(self, role: str) -> VersionedBinding:
        """The role's binding as Redis holds it now (and this worker's copy catches up)."""
        self.forget(role)
        return self.get(role)

    def _read(self, role: str) -> VersionedBinding:
        self.fresh.add(role)
        held = self.services.cache.bindings.get(role)
        try:
            record: VersionedBinding | None = self.services.store.get(role)
        except NotFound:
            if role not in self.services.cache.lost and held is None:
                raise
            record = None
        if record is None or (held is not None and held.version > record.version):
            # Redis lost the role or shows it older (noticed by the poll or not yet): a 503
            # to send again, never a 422 that would have the sender drop the trace.
            raise trace_on_lost_role(role)
        self.services.cache.put(record)
        return record


def not_bound(trace: Trace, record: VersionedBinding) -> str:
    """Why `trace` is refused `config_not_bound`: its config is in none of the role's arms."""
    binding = record.binding
    if binding.candidate is None:
        placed = (f"is not role {trace.role!r}'s current config {binding.current!r}, and the "
                  "role has no candidate")
    else:
        placed = (f"is neither role {trace.role!r}'s current config {binding.current!r} nor "
                  f"its candidate {binding.candidate!r}")
    return (f"config {trace.config!r} {placed} (binding version {record.version}); "
            "its trace would count in no arm")
