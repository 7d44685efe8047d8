"""Which Redis a binding table came from: its address and an identity rolegate writes there.

A router keeps its last good table on disk (router.server.kept_file) and
guards Redis's table against it (bindings.table_guard). That guard only means
something against the same Redis: a router pointed at another one must not
take that Redis's table for lost data, nor serve the old one. So the kept
table records where it came from: the address and database (`describe`, no
credentials) and the value of `rolegate:identity`, a random id a router writes
once into a Redis it reads a whole table from.

A Redis that lost its data lost its identity key too, so an identity that
differs proves nothing at the same address (the guard still applies there);
an equal identity at another address is the same Redis under another name.
"""

from __future__ import annotations

import uuid
from urllib.parse import parse_qs, urlsplit

from bindings.connection import Connection, RedisTarget
from bindings.redis_errors import redis_errors

#: A random id, set once (SET NX) in a Redis whose table a router took.
IDENTITY_KEY = "rolegate:identity"


def describe(target: RedisTarget) -> str:
    """The Redis and database `target` names, without credentials: `host:port/db`."""
    if target.sentinels:
        return f"sentinel:{target.sentinel_master}/0"
    parts = urlsplit(target.url)
    query_db = parse_qs(parts.query).get("db", [""])[0]
    if parts.scheme == "unix":
        return f"unix:{parts.path}/{query_db or '0'}"
    db = parts.path.strip("/") or query_db or "0"
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}/{db}"


def read_identity(connection: Connection) -> str | None:
    """The identity this Redis holds, or None (never written, or lost with its data)."""
    with redis_errors():
        raw = connection.get(IDENTITY_KEY)
    return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)


def ensure_identity(connection: Connection) -> str:
    """This Redis's identity, written now if it has none (the first writer's stands)."""
    with redis_errors():
        connection.set(IDENTITY_KEY, uuid.uuid4().hex, nx=True)
    found = read_identity(connection)
    return found or ""


def same_redis(kept: dict[str, str] | None, address: str, identity: str | None) -> bool:
    """Whether a table kept from `kept` (its address and identity) came from this Redis.

    No record of where it came from (a file from before this was kept): assume so.
    """
    if kept is None:
        return True
    if kept.get("address") == address:
        return True
    return identity is not None and kept.get("identity") == identity
