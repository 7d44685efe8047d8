"""Idempotency keys of binding writes: where they live and what they remember.

A write sent with an Idempotency-Key stores "<request fingerprint> <version>"
under the role's key (same hash slot), in the same Lua step as the write; a
later write with the same key answers that version's record instead of
writing again (bindings.store.BindingStore.write / replay).
"""

from __future__ import annotations

from typing import Protocol

from bindings.errors import IdempotencyKeyReused
from bindings.models import HistoryEntry, VersionedBinding

#: A write's Idempotency-Key: "<request fingerprint> <version it produced>", kept a day.
IDEMPOTENCY_KEY_TEMPLATE = "rolegate:{{{role}}}:idempotency:{key}"
IDEMPOTENCY_TTL_S = 24 * 3600


def idempotency_key(role: str, key: str) -> str:
    """The Redis key remembering which write an Idempotency-Key produced."""
    return IDEMPOTENCY_KEY_TEMPLATE.format(role=role, key=key)


def replayed_version(role: str, key: str, fingerprint: str, raw: bytes | str) -> int:
    """The version the earlier write produced; IdempotencyKeyReused for another request.

    The same key with a different request is refused: the caller reused a key
    by mistake, and replaying would answer a question it did not ask.
    """
    text = raw.decode() if isinstance(raw, bytes) else raw
    stored, _, version = text.rpartition(" ")
    if stored != fingerprint:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {key!r} was used for a different request on role {role!r}",
            role=role)
    return int(version)


class _History(Protocol):
    def history_entry(self, role: str, version: int) -> HistoryEntry: ...


def replayed_record(history: _History, role: str, key: str, fingerprint: str,
                    raw: bytes | str) -> VersionedBinding:
    """The record the earlier write with this key produced, read back from the history."""
    entry = history.history_entry(role, replayed_version(role, key, fingerprint, raw))
    return VersionedBinding(role=role, version=entry.version, binding=entry.binding,
                            updated_at=entry.time, updated_by=entry.actor)
