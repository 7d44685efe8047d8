"""A snapshot of the binding table as a client holds it, precompiled for resolving.

The client reads only the fields that route a job (`RoutedBinding`); the rest
of each record is kept as received, so a saved snapshot is a complete
`GET /v1/bindings` body that can bootstrap another client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rolegate.routing import Stage, bucket, resolve

log = logging.getLogger("rolegate.client")

#: One role, precompiled: (current answer, candidate answer or None, share).
#: With a candidate answer, a key goes to it iff bucket(role, key) < share.
Entry = tuple[dict[str, Any], dict[str, Any] | None, float]


class RoutedBinding(BaseModel):
    """The fields of a binding that decide an arm; the service validates the rest."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    current: str
    candidate: str | None = None
    stage: Stage = Stage.STABLE
    share: float = Field(0.0, ge=0.0, le=1.0)


class RoutedRecord(BaseModel):
    """One role's record in `GET /v1/bindings`, as far as routing reads it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: str
    version: int = Field(ge=1)
    binding: RoutedBinding


class Snapshot:
    """One generation of the binding table, precompiled for resolving."""

    __slots__ = ("generation", "raw", "records", "entries")

    def __init__(self, generation: int, raw: Mapping[str, Mapping[str, Any]]) -> None:
        self.generation = generation
        self.raw = {role: dict(record) for role, record in raw.items()}
        self.records = {role: RoutedRecord.model_validate(record)
                        for role, record in self.raw.items()}
        self.entries = {role: compile_role(role, rec) for role, rec in self.records.items()}

    @classmethod
    def from_json(cls, body: Any) -> Snapshot:
        """Read the body of `GET /v1/bindings`: {"generation", "roles": {role: record}}."""
        if not isinstance(body, Mapping) or not isinstance(body.get("roles"), Mapping):
            raise ValueError('a bindings snapshot is {"generation": N, "roles": {role: record}}')
        generation = int(body.get("generation", 0))
        snapshot = cls(generation, body["roles"])
        for role, record in snapshot.records.items():
            if record.role != role:
                raise ValueError(f"snapshot lists role {record.role!r} under {role!r}")
        return snapshot

    def to_json(self) -> dict[str, Any]:
        """The snapshot in the shape of `GET /v1/bindings` (usable as a bootstrap)."""
        return {"generation": self.generation, "roles": self.raw}


def compile_role(role: str, record: RoutedRecord) -> Entry:
    """Precompute a role's answers so resolving is one hash, one compare and one copy.

    The answers are built from `rolegate.routing.resolve` itself and checked
    against it on probe keys, so a change to the server's routing cannot
    silently diverge from this shortcut: the snapshot is refused instead (the
    client keeps its last one and says stale).
    """
    binding = record.binding
    answer = resolve(role, binding, record.version, "")
    current = {**answer, "arm": "current", "config": binding.current}
    entry: Entry = (current, None, 0.0)
    if binding.candidate is not None and binding.stage in (Stage.CANARY, Stage.FULL):
        candidate = {**answer, "arm": "candidate", "config": binding.candidate}
        entry = (candidate, None, 0.0) if binding.stage is Stage.FULL else (
            current, candidate, binding.share)
    for probe in _PROBE_KEYS:
        expected = resolve(role, binding, record.version, probe)
        if _answer(role, entry, probe, False) != expected:
            log.error("client routing disagrees with rolegate.routing for %r", role)
            raise ValueError(f"client routing disagrees with rolegate.routing for {role!r}")
    return entry


def _answer(role: str, entry: Entry, key: str, stale: bool) -> dict[str, Any]:
    current, candidate, share = entry
    answer = (candidate if candidate is not None and bucket(role, key) < share
              else current).copy()
    answer["key"] = key
    answer["stale"] = stale
    return answer


#: Enough keys that a canary of 10% almost surely has some on each arm.
_PROBE_KEYS = tuple(f"probe-{n}" for n in range(24))


