"""What each worker that found Redis's data lost holds of the lost roles, shared in Redis.

Each worker keeps its own copy of the table; when Redis loses data the copies
may differ (one worker took version 88 before the loss, another still held 87).
The operator's way out (`restore-snapshot`, `accept-redis`) is answered by one
worker, which must act on the newest copy any worker holds, not its own. So
every worker serving lost roles publishes its kept records of them here, in
one hash (`rolegate:kept`, a field per worker, each stamped with the time it
was written), and withdraws them when the loss ends. Entries older than
KEPT_TTL_S are a worker that went away and are ignored; the key expires with
the last publisher.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

from pydantic import ValidationError

from bindings.connection import Connection
from bindings.errors import Conflict
from bindings.models import VersionedBinding
from bindings.redis_errors import redis_errors
from bindings.table_guard import newest_copies

#: One hash: worker name -> {"at": unix time, "roles": {role: record},
#: "archived": {role: version}} (lost roles the worker holds archived).
KEPT_KEY = "rolegate:kept"
#: A worker republishes well within this; older entries are ignored.
KEPT_TTL_S = 90.0


def worker_name() -> str:
    """This process, as named in the hash: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Copy:
    """One worker's kept state of the lost roles: live records, archived versions."""

    records: dict[str, VersionedBinding]
    archived: dict[str, int]


def publish(connection: Connection, worker: str, copy: Copy) -> None:
    """Put `worker`'s kept copy of the lost roles in the hash (and keep the hash alive)."""
    payload = json.dumps({"at": time.time(),
                          "roles": {role: rec.model_dump(mode="json")
                                    for role, rec in copy.records.items()},
                          "archived": copy.archived},
                         separators=(",", ":"))
    with redis_errors():
        pipe = connection.pipeline(transaction=False)
        pipe.hset(KEPT_KEY, worker, payload)
        pipe.expire(KEPT_KEY, int(KEPT_TTL_S * 2))
        pipe.execute()


def withdraw(connection: Connection, worker: str) -> None:
    """Take `worker`'s entry out (its loss ended)."""
    with redis_errors():
        connection.hdel(KEPT_KEY, worker)


def gather(connection: Connection) -> dict[str, Copy]:
    """Every live worker's kept copy, by worker; unreadable or old entries left out."""
    with redis_errors():
        raw = connection.hgetall(KEPT_KEY)
    now = time.time()
    found: dict[str, Copy] = {}
    for field, value in raw.items():
        try:
            entry = json.loads(value)
            if now - float(entry["at"]) > KEPT_TTL_S:
                continue
            found[_text(field)] = Copy(
                {role: VersionedBinding.model_validate(rec)
                 for role, rec in entry["roles"].items()},
                {str(role): int(v) for role, v in (entry.get("archived") or {}).items()})
        except (ValueError, KeyError, TypeError, ValidationError):
            continue  # a worker of another release, or a torn value: not a copy to act on
    return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def newest(connection: Connection, own: Copy) -> Copy:
    """The newest kept state of each lost role, over this worker's (`own`) and every other's.

    A role held archived by one worker and live by another goes to the higher
    version. Conflict (409) naming the roles two workers hold at one version
    with different bindings: no version settles those, so nothing is written.
    """
    copies = gather(connection)
    copies[worker_name()] = own
    found, disagree = newest_copies({worker: c.records for worker, c in copies.items()})
    archived: dict[str, int] = {}
    for copy in copies.values():
        for role, version in copy.archived.items():
            archived[role] = max(version, archived.get(role, 0))
    for role, version in list(archived.items()):
        record = found.get(role)
        if record is not None and record.version > version:
            del archived[role]
        elif record is not None:
            del found[role]
    if disagree:
        named = "; ".join(f"{role}: {why}" for role, why in sorted(disagree.items()))
        raise Conflict(f"the routers' kept tables disagree, nothing written: {named}. "
                       "Write those roles by hand (PUT /v1/bindings/<role>) and run it again",
                       disagreements=disagree)
    return Copy(found, archived)
