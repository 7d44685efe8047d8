"""The binding table in Redis: one record per role, compare-and-set, append-only history.

Every write goes through one Lua script, so the new binding, its history entry,
the role index and the change counter move together or not at all. The role is a
Redis Cluster hash tag in its keys (``rolegate:{summarizer}:binding``), so one
role's keys share a slot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from pydantic import BaseModel, ValidationError

from bindings.errors import Conflict, CorruptRecord, NotFound, StoreUnavailable
from bindings.models import Binding, HistoryEntry, VersionedBinding

BINDING_KEY_TEMPLATE = "rolegate:{{{role}}}:binding"
HISTORY_KEY_TEMPLATE = "rolegate:{{{role}}}:history"
ROLES_KEY = "rolegate:roles"
#: Grows by one on every change to any role: the cheap thing routers poll.
GENERATION_KEY = "rolegate:generation"
CHANGES_CHANNEL = "rolegate:changes"
_MAX_VERSION = 2**63 - 1

M = TypeVar("M", bound=BaseModel)

# KEYS: binding hash, history list, role index set, generation counter
# ARGV: role, expected version, record JSON, history entry JSON, channel
# Returns {1, new_version, generation} on success, {0, current_version} on a stale write.
_COMPARE_AND_SET = """
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[2]) then
  return {0, current}
end
local version = current + 1
redis.call('HSET', KEYS[1], 'version', version, 'record', ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[4])
redis.call('SADD', KEYS[3], ARGV[1])
local generation = redis.call('INCR', KEYS[4])
redis.call('PUBLISH', ARGV[5], ARGV[1])
return {1, version, generation}
"""


def binding_key(role: str) -> str:
    """The Redis key of a role's current binding record."""
    return BINDING_KEY_TEMPLATE.format(role=role)


def history_key(role: str) -> str:
    """The Redis key of a role's append-only history list (oldest first)."""
    return HISTORY_KEY_TEMPLATE.format(role=role)


class BindingStore:
    """Reads and compare-and-set writes of bindings, with their history."""

    def __init__(self, connection: redis.Redis, clock: Callable[[], float] = time.time) -> None:
        self.connection = connection
        self.clock = clock
        self._cas = connection.register_script(_COMPARE_AND_SET)

    # -- reads ---------------------------------------------------------------

    def get(self, role: str) -> VersionedBinding:
        """The role's current binding and version; NotFound if there is none."""
        with _redis_errors():
            raw = self.connection.hget(binding_key(role), "record")
        if raw is None:
            raise NotFound(f"no binding for role {role!r}", role=role)
        return _load_record(raw)

    def roles(self) -> list[str]:
        """Every role that has a binding, sorted."""
        with _redis_errors():
            members = self.connection.smembers(ROLES_KEY)
        return sorted(_text(m) for m in members)

    def generation(self) -> int:
        """The change counter: it differs whenever any binding changed."""
        with _redis_errors():
            raw = self.connection.get(GENERATION_KEY)
        return int(raw or 0)

    def snapshot(self) -> tuple[int, dict[str, VersionedBinding]]:
        """The generation and every binding, in two round trips.

        The generation is read together with the role index, before the records:
        a write landing in between makes the records newer than the generation,
        never older, so a poller comparing generations reloads again instead of
        keeping a table that misses the write.
        """
        with _redis_errors():
            head = self.connection.pipeline(transaction=True)
            head.get(GENERATION_KEY)
            head.smembers(ROLES_KEY)
            raw_generation, members = head.execute()
            roles = sorted(_text(m) for m in members)
            pipe = self.connection.pipeline(transaction=False)
            for role in roles:
                pipe.hget(binding_key(role), "record")
            results = pipe.execute() if roles else []
        generation = int(raw_generation or 0)
        bindings = {
            role: _load_record(raw) for role, raw in zip(roles, results) if raw is not None
        }
        return generation, bindings

    def history(self, role: str, *, limit: int | None = None,
                offset: int = 0) -> list[HistoryEntry]:
        """The role's changes, newest first; NotFound if the role never existed."""
        key = history_key(role)
        with _redis_errors():
            length = self.connection.llen(key)
            if length == 0:
                raise NotFound(f"no binding for role {role!r}", role=role)
            # Stored oldest first; index from the end to read newest first.
            end = length - 1 - offset
            start = 0 if limit is None else max(0, end - limit + 1)
            if end < 0:
                return []
            raws = self.connection.lrange(key, start, end)
        return [_load_entry(raw) for raw in reversed(raws)]

    def history_entry(self, role: str, version: int) -> HistoryEntry:
        """The history entry that produced `version`; NotFound if there is none."""
        # Redis list indexes are signed 64-bit: a larger version cannot exist, and
        # asking LINDEX for one would be a server error rather than a 404.
        if not 1 <= version <= _MAX_VERSION:
            raise NotFound(f"role {role!r} has no version {version}", role=role, version=version)
        with _redis_errors():
            # Versions start at 1 and each adds exactly one entry, so entry N-1 is version N.
            raw = self.connection.lindex(history_key(role), version - 1)
        if raw is None:
            raise NotFound(f"role {role!r} has no version {version}", role=role, version=version)
        entry = _load_entry(raw)
        if entry.version != version:  # pragma: no cover - would mean a corrupted history
            raise NotFound(f"history of {role!r} is out of order at {version}", role=role)
        return entry

    # -- writes --------------------------------------------------------------

    def write(
        self,
        role: str,
        binding: Binding,
        *,
        expected_version: int,
        actor: str,
        action: str,
        reason: str,
        details: dict[str, Any] | None = None,
    ) -> VersionedBinding:
        """Compare-and-set: store `binding` as version expected+1 with its history entry.

        `expected_version` is the version the writer read (0 to create the role).
        A stale writer gets `Conflict` carrying the current version; nothing is written.
        """
        now = self.clock()
        version = expected_version + 1
        record = VersionedBinding(
            role=role, version=version, binding=binding, updated_at=now, updated_by=actor
        )
        entry = HistoryEntry(
            role=role,
            version=version,
            time=now,
            actor=actor,
            action=action,
            reason=reason,
            binding=binding,
            details=details or {},
        )
        keys = [binding_key(role), history_key(role), ROLES_KEY, GENERATION_KEY]
        args: list[str | int] = [role, expected_version, record.model_dump_json(),
                                 entry.model_dump_json(), CHANGES_CHANNEL]
        with _redis_errors():
            result = self._cas(keys=keys, args=args)
        if int(result[0]) != 1:
            current = int(result[1])
            if current == 0:
                raise NotFound(
                    f"no binding for role {role!r}; create it without If-Match",
                    role=role, current_version=0,
                )
            raise Conflict(
                f"role {role!r} is at version {current}, not {expected_version}",
                role=role, current_version=current, expected_version=expected_version,
            )
        return record


class _redis_errors:
    """Turn redis-py connection failures into StoreUnavailable (a 503, not a 500)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if exc is not None and isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            raise StoreUnavailable(f"Redis did not answer: {exc}") from exc


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def load_stored(model: type[M], raw: bytes | str, what: str, **details: Any) -> M:
    """`raw` read back as `model`, or CorruptRecord naming `what`.

    A stored record that no longer validates was written by other software or a
    bug: a 500 naming it, never a 422 blaming the caller who merely read it.
    """
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise CorruptRecord(f"{what} is unreadable: {exc}", **details) from exc


def _load_record(raw: bytes | str) -> VersionedBinding:
    return load_stored(VersionedBinding, raw, "stored binding record")


def _load_entry(raw: bytes | str) -> HistoryEntry:
    return load_stored(HistoryEntry, raw, "stored history entry")
