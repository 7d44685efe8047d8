"""Reading the binding table the way a router guards it, and writing a kept table back.

`read_table` is `BindingStore.snapshot` plus what bindings.table_guard needs to
tell a real change from lost data: the version of each archived role, and the
records of the roles the router holds even when the role index no longer lists
them (the index is one key on one master; losing it must not look like every
role gone).

`write_back` is the operator's way out after Redis lost data
(`rolegate bindings restore-snapshot`, `POST /v1/restore-snapshot`):
each lost role's last good binding is written again, one version above the one
the routers hold, so every router takes it as the newer record; or, with
`discard`, written archived, so the role leaves every router's table as an
operator's archive would. Either way with a history entry saying so. The
history from before the loss is gone with Redis's data; the entries left keep
their own version numbers (`BindingStore.history_entry` finds them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from bindings.connection import is_cluster_client
from bindings.errors import Conflict
from bindings.models import HistoryEntry, VersionedBinding
from bindings.redis_errors import redis_errors, write_errors
from bindings.store import (
    ARCHIVED_KEY,
    GENERATION_KEY,
    ROLES_KEY,
    ArchiveNote,
    BindingStore,
    binding_key,
    history_key,
    load_stored,
)

#: The history action of a role written back from a router's kept table.
RESTORE_ACTION = "restore_snapshot"
#: The history action of a lost role archived instead of written back (`--discard`).
DISCARD_ACTION = "discard_snapshot"
#: The history action of a role whose Redis record was taken over the routers' (`accept-redis`).
ACCEPT_ACTION = "accept_redis"

# KEYS: binding hash, history list (one role: one slot)
# ARGV: the version the writer found (0: no record), the new version, record JSON,
#       history entry JSON, archive note JSON ("" to leave the role live)
# Returns {1, version} written, {0, current} when the record moved meanwhile.
_WRITE_BACK = """
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then return {0, current} end
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'record', ARGV[3])
if ARGV[5] == '' then
  redis.call('HDEL', KEYS[1], 'archived')
else
  redis.call('HSET', KEYS[1], 'archived', ARGV[5])
end
redis.call('RPUSH', KEYS[2], ARGV[4])
return {1, tonumber(ARGV[2])}
"""


@dataclass(frozen=True)
class Table:
    """The live table, and the version of each archived role, as Redis holds them."""

    generation: int
    bindings: dict[str, VersionedBinding]
    archived: dict[str, int]


def read_table(store: BindingStore, also: Iterable[str] = ()) -> Table:
    """Every role of the index and of `also`: the live records, the archived versions."""
    connection = store.connection
    with redis_errors():
        if is_cluster_client(connection):
            raw_generation = connection.get(GENERATION_KEY)
            members = connection.smembers(ROLES_KEY)
            noted = connection.hgetall(ARCHIVED_KEY)
        else:
            head = connection.pipeline(transaction=False)
            head.get(GENERATION_KEY)
            head.smembers(ROLES_KEY)
            head.hgetall(ARCHIVED_KEY)
            raw_generation, members, noted = head.execute()
        roles = sorted({_text(m) for m in members} | set(also))
        pipe = connection.pipeline(transaction=False)
        for role in roles:
            pipe.hmget(binding_key(role), ["record", "archived", "version"])
        results = pipe.execute() if roles else []
    bindings: dict[str, VersionedBinding] = {}
    # Every archived role's version, from the note the store keeps (one read, not one per
    # role); the roles read one by one below correct it.
    archived = {_text(role): int(version) for role, version in noted.items()}
    for role, (raw, note, version) in zip(roles, results):
        if raw is None:
            continue
        if note is not None:
            archived[role] = int(version or 0)
            continue
        bindings[role] = load_stored(VersionedBinding, raw, "stored binding record")
        archived.pop(role, None)  # live: a note left by a lost removal says nothing
    return Table(int(raw_generation or 0), bindings, archived)


@dataclass(frozen=True)
class WriteBack:
    """What `write_back` or `accept_redis` did, role by role."""

    written: dict[str, int]
    skipped: dict[str, str]


def write_back(store: BindingStore, kept: Mapping[str, VersionedBinding], *, actor: str,
               reason: str, discard: bool = False, generation: int = 0,
               archived: Mapping[str, int] | None = None) -> WriteBack:
    """Write each kept record back one version above its own (archived with `discard`).

    A role whose record in Redis is already at or above the kept version is
    left alone (someone wrote it since: theirs stands). `archived` holds the
    roles the routers hold archived at a version above Redis's live record:
    Redis's record is written archived above it. `generation` is the kept
    table's; the change hint is raised above it so no router mistakes the
    restored table for an older one.
    """
    written: dict[str, int] = {}
    skipped: dict[str, str] = {}
    for role, version in sorted((archived or {}).items()):
        current, record, is_archived = _found(store, role)
        if record is None or is_archived or current >= version:
            skipped[role] = f"Redis already has it archived or at version {current}"
            continue
        written[role] = _write(store, role, current, record, above=version, actor=actor,
                               reason=reason, action=DISCARD_ACTION if discard
                               else RESTORE_ACTION, archived=True,
                               details={"kept_archived_version": version,
                                        "found_version": current,
                                        "kept_generation": generation})
    for role, record in sorted(kept.items()):
        current = _found(store, role)[0]
        if current >= record.version:
            skipped[role] = f"Redis already has version {current}"
            continue
        details = {"kept_version": record.version, "found_version": current,
                   "kept_generation": generation}
        written[role] = _write(store, role, current, record, above=record.version,
                               actor=actor, reason=reason,
                               action=DISCARD_ACTION if discard else RESTORE_ACTION,
                               archived=discard, details=details)
    _raise_hint(store, generation)
    return WriteBack(written, skipped)


def accept_redis(store: BindingStore, kept: Mapping[str, VersionedBinding], *, actor: str,
                 reason: str, generation: int = 0,
                 archived: Mapping[str, int] | None = None) -> WriteBack:
    """Make Redis's own state of each kept role the newest, so every router takes it.

    After Redis is restored from a backup on purpose, the routers hold newer
    records than Redis and (rightly) refuse its table. For each role they
    hold: Redis's record (live, or archived) is written again one version above
    the held one, with an `accept_redis` history entry; a role Redis has no
    record of (made after the backup) is written archived, so it leaves every
    table. A role the routers hold archived (`archived`: the version) that
    Redis has live below it comes back: Redis's record, live, above that
    version. A role Redis already holds at or above the kept version is left alone.
    """
    written: dict[str, int] = {}
    skipped: dict[str, str] = {}
    for role, version in sorted((archived or {}).items()):
        current, record, is_archived = _found(store, role)
        if record is None or is_archived or current >= version:
            skipped[role] = f"Redis already has it archived or at version {current}"
            continue
        written[role] = _write(store, role, current, record, above=version, actor=actor,
                               reason=reason, action=ACCEPT_ACTION, archived=False,
                               details={"kept_archived_version": version,
                                        "found": f"version {current}",
                                        "kept_generation": generation})
    for role, held in sorted(kept.items()):
        current, record, is_archived = _found(store, role)
        if current >= held.version:
            skipped[role] = f"Redis already has version {current}"
            continue
        if record is None:
            found = "no record"
        else:
            found = f"version {current}" + (" (archived)" if is_archived else "")
        details = {"kept_version": held.version, "found": found,
                   "kept_generation": generation}
        written[role] = _write(store, role, current, record or held, above=held.version,
                               actor=actor, reason=reason, action=ACCEPT_ACTION,
                               archived=record is None or is_archived, details=details)
    _raise_hint(store, generation)
    return WriteBack(written, skipped)


def _found(store: BindingStore, role: str) -> tuple[int, VersionedBinding | None, bool]:
    """Redis's version of `role` (0: no record), its record, and whether it is archived."""
    with redis_errors():
        raw, note, version = store.connection.hmget(binding_key(role),
                                                    ["record", "archived", "version"])
    record = None if raw is None else load_stored(VersionedBinding, raw,
                                                  "stored binding record")
    return int(version or 0), record, note is not None


def _write(store: BindingStore, role: str, current: int, record: VersionedBinding, *,
           above: int, actor: str, reason: str, action: str, archived: bool,
           details: Mapping[str, object]) -> int:
    """Write `record`'s binding as version `above` + 1 in one compare-and-set on `current`."""
    script = store.connection.register_script(_WRITE_BACK)
    now = store.clock()
    version = max(above, current) + 1
    entry = HistoryEntry(role=role, version=version, time=now, actor=actor, action=action,
                         reason=reason, binding=record.binding, details=dict(details))
    note = "" if not archived else ArchiveNote(
        reason=reason, actor=actor, time=now, version=version).model_dump_json()
    written = VersionedBinding(role=role, version=version, binding=record.binding,
                               updated_at=now, updated_by=actor)
    if not archived:
        with redis_errors():
            store.connection.sadd(ROLES_KEY, role)
    with write_errors():
        result = script(keys=[binding_key(role), history_key(role)],
                        args=[current, version, written.model_dump_json(),
                              entry.model_dump_json(), note])
    if int(result[0]) != 1:
        raise Conflict(f"role {role!r} changed during the restore (now version "
                       f"{int(result[1])}); run it again", role=role,
                       current_version=int(result[1]))
    with redis_errors():  # the archived versions' note follows (bindings.store)
        if archived:
            store.connection.hset(ARCHIVED_KEY, role, version)
        else:
            store.connection.hdel(ARCHIVED_KEY, role)
    store.announce(role)
    return version


def _raise_hint(store: BindingStore, generation: int) -> None:
    """Put the change hint above the kept table's, so it never reads as going back."""
    with redis_errors():
        current = int(store.connection.get(GENERATION_KEY) or 0)
        if current < generation:
            store.connection.incrby(GENERATION_KEY, generation - current)
    store.announce("*")  # one more: above the kept generation, and every router hears it


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value

