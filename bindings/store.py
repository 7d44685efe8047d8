"""The binding table in Redis: one record per role, compare-and-set, append-only history.

A change is one Lua script on the role's own keys: the new record with its
version and the history entry move together or not at all. The role is a Redis
Cluster hash tag in those keys (``rolegate:{summarizer}:binding``), so the
script touches one slot. The keys without a role are each written in a step of
their own (docs/scaling.md): the role index before the script that creates
(or un-archives) a role, so it is always a superset of the roles that have a
binding, and the change hint (the
generation counter, and a message on the change channel) after it. The
per-role versions are the truth; the hint only tells routers to reload sooner,
and a lost hint is repaired by their periodic full reload.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import redis
from pydantic import BaseModel, ConfigDict, ValidationError

from bindings.connection import Connection, is_cluster_client
from bindings.errors import (
    Archived,
    Conflict,
    CorruptRecord,
    NotFound,
    ReplicationTimeout,
    StoreUnavailable,
)
from bindings.idempotency import IDEMPOTENCY_TTL_S, idempotency_key, replayed_record
from bindings.models import Binding, HistoryEntry, VersionedBinding
from bindings.redis_errors import redis_errors, write_errors
from rolegate.config_ids import STORED

log = logging.getLogger("rolegate.store")

BINDING_KEY_TEMPLATE = "rolegate:{{{role}}}:binding"
HISTORY_KEY_TEMPLATE = "rolegate:{{{role}}}:history"
ROLES_KEY = "rolegate:roles"
ARCHIVED_KEY = "rolegate:archived"  # role -> version archived at (bindings.recovery)
#: The change hint: grows by one after every change to any role; what routers poll.
GENERATION_KEY = "rolegate:generation"
CHANGES_CHANNEL = "rolegate:changes"
_MAX_VERSION = 2**63 - 1

M = TypeVar("M", bound=BaseModel)

# KEYS: binding hash, history list[, idempotency key] (one role: one slot)
# ARGV: expected version, record JSON, history entry JSON, archive mode ("" an
#       ordinary write, "restore" un-archive, else the archive note JSON to set)[,
#       request fingerprint, idempotency key ttl]
# Returns {1, new_version} on success, {0, current_version} on a stale write,
# {2, current_version} when an ordinary write meets an archived role (or a restore
# one that is not): archiving is itself a versioned change of the role's own hash;
# {3, "<fingerprint> <version>"} when the idempotency key was used before (nothing written).
_COMPARE_AND_SET = """
if KEYS[3] then
  local seen = redis.call('GET', KEYS[3])
  if seen then return {3, seen} end
end
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then
  return {0, current}
end
local archived = redis.call('HEXISTS', KEYS[1], 'archived') == 1
if archived ~= (ARGV[4] == 'restore') then
  return {2, current}
end
local version = current + 1
redis.call('HSET', KEYS[1], 'version', version, 'record', ARGV[2])
redis.call('RPUSH', KEYS[2], ARGV[3])
if ARGV[4] == 'restore' then
  redis.call('HDEL', KEYS[1], 'archived')
elseif ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'archived', ARGV[4])
end
if KEYS[3] then
  redis.call('SET', KEYS[3], ARGV[5] .. ' ' .. version, 'EX', ARGV[6])
end
return {1, version}
"""

# KEYS: the generation counter. ARGV: channel, role. Returns the new generation.
# The message goes out after the increment, so a woken watcher reads the new value.
_HINT = """
local generation = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return generation
"""


def binding_key(role: str) -> str:
    """The Redis key of a role's current binding record."""
    return BINDING_KEY_TEMPLATE.format(role=role)


def history_key(role: str) -> str:
    """The Redis key of a role's append-only history list (oldest first)."""
    return HISTORY_KEY_TEMPLATE.format(role=role)


class BindingStore:
    """Reads and compare-and-set writes of bindings, with their history."""

    def __init__(self, connection: Connection, clock: Callable[[], float] = time.time, *,
                 min_replicas: int = 0, replica_wait_ms: int = 1000) -> None:
        self.connection = connection
        self.clock = clock
        #: A change is answered only once this many replicas confirm it (WAIT).
        self.min_replicas = min_replicas
        self.replica_wait_ms = replica_wait_ms
        self._cas = connection.register_script(_COMPARE_AND_SET)
        self._hint = connection.register_script(_HINT)

    # -- reads ---------------------------------------------------------------

    def get(self, role: str) -> VersionedBinding:
        """The role's current binding and version; NotFound if none, Archived if archived."""
        record, note = self.get_any(role)
        if note is not None:
            raise archived_error(role, note)
        return record

    def get_any(self, role: str) -> tuple[VersionedBinding, ArchiveNote | None]:
        """The role's last binding and version, archived or not, with the archive note."""
        with _redis_errors():
            raw, note = self.connection.hmget(binding_key(role), ["record", "archived"])
        if raw is None:
            raise NotFound(f"no binding for role {role!r}", role=role)
        record = _load_record(raw)
        if note is None:
            return record, None
        return record, load_stored(ArchiveNote, note, "stored archive note", role=role)

    def roles(self) -> list[str]:
        """Every role that has a binding, sorted."""
        with _redis_errors():
            members = sorted(_text(m) for m in self.connection.smembers(ROLES_KEY))
            pipe = self.connection.pipeline(transaction=False)
            for role in members:
                pipe.hmget(binding_key(role), ["record", "archived"])
            found = pipe.execute() if members else []
        # The index is written before the binding: a create that lost its race
        # (or died half-way) leaves a member with no binding, which is no role;
        # an archived role whose removal from the index was lost is none either.
        return [role for role, (record, note) in zip(members, found)
                if record is not None and note is None]

    def generation(self) -> int:
        """The change hint: it moves after every change (a lost one is repaired, see module)."""
        with _redis_errors():
            raw = self.connection.get(GENERATION_KEY)
        return int(raw or 0)

    def snapshot(self) -> tuple[int, dict[str, VersionedBinding]]:
        """The generation and every binding, in two round trips (three on a Cluster).

        The generation is read before the role index and the index before the
        records (a writer does it the other way round: index, record, hint), so
        the records are never older than the generation: a poller comparing
        generations reloads again instead of keeping a table that misses a write.
        """
        with _redis_errors():
            if is_cluster_client(self.connection):
                # Different slots, maybe different nodes: a pipeline would not keep order.
                raw_generation = self.connection.get(GENERATION_KEY)
                members = self.connection.smembers(ROLES_KEY)
            else:
                head = self.connection.pipeline(transaction=False)
                head.get(GENERATION_KEY)
                head.smembers(ROLES_KEY)
                raw_generation, members = head.execute()
            roles = sorted(_text(m) for m in members)
            pipe = self.connection.pipeline(transaction=False)
            for role in roles:
                pipe.hmget(binding_key(role), ["record", "archived"])
            results = pipe.execute() if roles else []
        generation = int(raw_generation or 0)
        # An archived role is out of the table even if its removal from the index was lost.
        bindings = {
            role: _load_record(raw) for role, (raw, note) in zip(roles, results)
            if raw is not None and note is None
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
        entry = None if raw is None else _load_entry(raw)
        if entry is None or entry.version != version:
            # Only a history written back after Redis lost data, or accepted after a
            # restore (bindings.recovery), skips versions: there, look for the entry
            # by its own number. A contiguous history ends at its length.
            with _redis_errors():
                length = self.connection.llen(history_key(role))
                last = self.connection.lindex(history_key(role), -1)
                raws = [] if last is None or _load_entry(last).version == length else \
                    self.connection.lrange(history_key(role), 0, -1)
            entry = next((e for e in map(_load_entry, raws) if e.version == version), None)
        if entry is None:
            raise NotFound(f"role {role!r} has no version {version}", role=role, version=version)
        return entry

    def replay(self, role: str, key: str, fingerprint: str) -> VersionedBinding | None:
        """The record an earlier write with Idempotency-Key `key` produced, or None."""
        with _redis_errors():
            raw = self.connection.get(idempotency_key(role, key))
        return None if raw is None else replayed_record(self, role, key, fingerprint, raw)

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
        archive: ArchiveNote | Literal["restore"] | None = None,
        idempotency: tuple[str, str] | None = None,
    ) -> VersionedBinding:
        """Compare-and-set: store `binding` as version expected+1 with its history entry.

        `expected_version` is the version the writer read (0 to create the role).
        A stale writer gets `Conflict` carrying the current version; nothing is written.
        `archive` archives the role in the same step (an ArchiveNote), or restores an
        archived one ("restore"); an ordinary write to an archived role raises Archived.
        `idempotency` is (Idempotency-Key, request fingerprint): a key already used
        answers the record it produced then, and nothing is written again.
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
        keys = [binding_key(role), history_key(role)]
        mode = "" if archive is None else archive if isinstance(archive, str) \
            else archive.model_dump_json()
        args: list[str | int] = [expected_version, record.model_dump_json(),
                                 entry.model_dump_json(), mode]
        if idempotency is not None:
            keys.append(idempotency_key(role, idempotency[0]))
            args += [idempotency[1], IDEMPOTENCY_TTL_S]
        if expected_version == 0 or archive == "restore":
            # First the index (a superset of the roles), then the role's own step.
            # Only a role entering the table needs it: a role being changed is
            # listed already, and on a Cluster the index is on one master that
            # must not hold every other master's roles hostage (docs/scaling.md).
            with _redis_errors():
                self.connection.sadd(ROLES_KEY, role)
        with write_errors():
            result, replicas = self._compare_and_set(keys, args)
        if int(result[0]) == 3 and idempotency is not None:
            return replayed_record(self, role, idempotency[0], idempotency[1], result[1])
        if int(result[0]) == 2:
            if archive == "restore":
                raise Conflict(f"role {role!r} is not archived", role=role,
                               current_version=int(result[1]))
            raise archived_error(role, self.get_any(role)[1])
        if int(result[0]) == 1 and archive is not None:
            # Out of the index after the archive committed (a lost removal lists nothing).
            with _redis_errors():
                if isinstance(archive, ArchiveNote):
                    self.connection.srem(ROLES_KEY, role)
                    self.connection.hset(ARCHIVED_KEY, role, archive.version)
                else:
                    self.connection.hdel(ARCHIVED_KEY, role)
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
        self.announce(role)
        if replicas is not None and replicas < self.min_replicas:
            raise ReplicationTimeout(
                f"role {role!r} version {version} is on the primary but only {replicas} of "
                f"{self.min_replicas} replicas confirmed it within {self.replica_wait_ms} ms; "
                "it may be lost if the primary fails now: read the role back before retrying",
                role=role, version=version, replicas=replicas, required=self.min_replicas)
        return record

    def announce(self, role: str) -> int | None:
        """Bump the change hint and publish `role` on the change channel.

        Called after every change, and by a router that found a change whose
        hint was lost. A hint that cannot be written is logged, never raised:
        the change itself is committed, and a full reload finds it.
        """
        try:
            with _redis_errors():
                return int(self._hint(keys=[GENERATION_KEY], args=[CHANGES_CHANNEL, role]))
        except StoreUnavailable as exc:
            log.warning("change hint for role %r lost (routers see the change at their next "
                        "full reload): %s", role, exc.message)
            return None

    def _compare_and_set(self, keys: list[str],
                         args: list[str | int]) -> tuple[list[Any], int | None]:
        """Run the script; with `min_replicas`, WAIT on the same connection right after it.

        Returns the script's answer and how many replicas confirmed (None when
        not asked). WAIT counts the writes of the connection it runs on, so both
        go in one pipeline, to the node that holds the role on a Cluster.
        """
        if self.min_replicas <= 0:
            return list(self._cas(keys=keys, args=args)), None
        node_client: Any = self.connection
        if is_cluster_client(self.connection):
            node = self.connection.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
            node_client = self.connection.get_redis_connection(node)
        for _ in range(2):
            pipe = node_client.pipeline(transaction=False)
            pipe.evalsha(self._cas.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", self.min_replicas, self.replica_wait_ms)
            try:
                result, replicas = pipe.execute()
            except redis.exceptions.NoScriptError:
                # A restarted or failed-over server lost its script cache; the
                # refused EVALSHA wrote nothing.
                self._cas.sha = node_client.script_load(_COMPARE_AND_SET)
                continue
            return list(result), int(replicas)
        raise StoreUnavailable("the server keeps losing its script cache")


class ArchiveNote(BaseModel):
    """Why, when and by whom a role was archived (kept beside its last binding)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str
    actor: str
    time: float
    version: int


def archived_error(role: str, note: ArchiveNote | None) -> Archived:
    """The 410 an archived role answers: its reason, who archived it and when."""
    if note is None:  # pragma: no cover - restored between the refusal and this read
        return Archived(f"role {role!r} is archived", role=role)
    return Archived(f"role {role!r} was archived by {note.actor}: {note.reason}", role=role,
                    reason=note.reason, archived_by=note.actor, archived_at=note.time,
                    version=note.version)


#: The other stores wrap their Redis calls in this (see bindings.redis_errors).
_redis_errors = redis_errors


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def load_stored(model: type[M], raw: bytes | str, what: str, **details: Any) -> M:
    """`raw` read back as `model`, or CorruptRecord naming `what`.

    A stored record that no longer validates was written by other software or a
    bug: a 500 naming it, never a 422 blaming the caller who merely read it.
    """
    try:
        # Ids stored before the config-id rule existed stay readable.
        return model.model_validate_json(raw, context={STORED: True})
    except ValidationError as exc:
        raise CorruptRecord(f"{what} is unreadable: {exc}", **details) from exc


def _load_record(raw: bytes | str) -> VersionedBinding:
    return load_stored(VersionedBinding, raw, "stored binding record")


def _load_entry(raw: bytes | str) -> HistoryEntry:
    return load_stored(HistoryEntry, raw, "stored history entry")
