"""Whether a binding table read from Redis may replace the one a router holds.

A role's version only grows, and a role never leaves Redis: archiving is a
versioned change that keeps the record (bindings.store). So a role a router
holds at version N that Redis now lists with no record at all, at a version
below N, or archived at a version that is not above N, is proof that Redis lost
data (a restart on an empty volume, a FLUSHALL, a replica promoted before it
synced), not a change anyone made. Such a role keeps its held record; every
other role takes what Redis says, so an operator's real archive of every role
(each archived at a higher version) still empties the table.

Pure: it takes the two tables and returns data (no Redis, no clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from bindings.errors import StoreUnavailable
from bindings.models import VersionedBinding

#: The condition /healthz and the metrics name while some role is kept this way.
DATA_LOST = "redis_data_lost"


def lost_roles(held: Mapping[str, VersionedBinding], loaded: Mapping[str, VersionedBinding],
               archived: Mapping[str, int],
               held_archived: Mapping[str, int] | None = None) -> dict[str, str]:
    """Each held role Redis lost, with what Redis shows of it instead.

    `loaded` is the live table Redis gave; `archived` the version of each
    archived role Redis holds (an archive is a real change only above the held
    version). `held_archived` is the version at which the router saw each
    archived role archived: Redis showing one live at a lower version (a
    backup from before the archive) is a loss too, not the role coming back.
    """
    lost: dict[str, str] = {}
    for role, at in (held_archived or {}).items():
        live = loaded.get(role)
        if live is not None and live.version < at and role not in held:
            lost[role] = f"archived at version {at}, Redis has it live at version {live.version}"
    for role, record in held.items():
        found = loaded.get(role)
        if found is not None:
            if found.version < record.version:
                lost[role] = (f"held at version {record.version}, Redis has version "
                              f"{found.version}")
            continue
        version = archived.get(role)
        if version is None:
            lost[role] = f"held at version {record.version}, Redis has no record of it"
        elif version <= record.version:
            lost[role] = (f"held at version {record.version}, Redis has it archived at "
                          f"version {version}")
    return lost


def kept_table(held: Mapping[str, VersionedBinding], loaded: Mapping[str, VersionedBinding],
               lost: Iterable[str]) -> dict[str, VersionedBinding]:
    """What to serve: Redis's table, with each lost role's held record kept in it.

    A lost role held archived stays out of it (it is served as archived).
    """
    gone = set(lost)
    return {**{role: rec for role, rec in loaded.items() if role not in gone},
            **{role: held[role] for role in gone if role in held}}


def summary(lost: Mapping[str, str], limit: int = 5) -> str:
    """A one-line account of the lost roles for logs and /healthz."""
    shown = [f"{role} ({why})" for role, why in sorted(lost.items())[:limit]]
    more = len(lost) - limit
    tail = f" and {more} more" if more > 0 else ""
    return (f"Redis lost data: {len(lost)} role(s) it should hold are gone or older: "
            f"{'; '.join(shown)}{tail}. Serving the last good binding of each, marked stale; "
            "run `rolegate bindings restore-snapshot` to write them back, or, if Redis was "
            "restored from a backup on purpose, `rolegate bindings accept-redis` to serve "
            "Redis's table")


def newest_copies(copies: Mapping[str, Mapping[str, VersionedBinding]]
                  ) -> tuple[dict[str, VersionedBinding], dict[str, str]]:
    """Per role, the highest version any worker holds; and the roles workers disagree on.

    `copies` is each worker's kept records (by worker name). Two workers
    holding the same version of a role with different bindings is a
    disagreement no version can settle: named, and that role left out.
    """
    newest: dict[str, VersionedBinding] = {}
    holder: dict[str, str] = {}
    disagree: dict[str, str] = {}
    for worker, records in sorted(copies.items()):
        for role, record in records.items():
            known = newest.get(role)
            if known is None or record.version > known.version:
                newest[role], holder[role] = record, worker
            elif record.version == known.version and record.binding != known.binding:
                disagree[role] = (f"workers {holder[role]} and {worker} both hold version "
                                  f"{record.version} with different bindings")
    for role in disagree:
        newest.pop(role, None)
    return newest, disagree


def trace_on_lost_role(role: str) -> StoreUnavailable:
    """The 503 a trace for a role Redis lost gets: retryable, and saying what to run."""
    return StoreUnavailable(
        f"Redis lost its data for role {role!r} (routers serve its kept binding); the trace "
        "is not stored: send it again once `rolegate bindings restore-snapshot` or "
        "`accept-redis` has run", role=role, condition=DATA_LOST)
