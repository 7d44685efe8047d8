"""The binding table a router keeps on disk, and which Redis it came from.

`<ROLEGATE_DATA_DIR>/bindings.snapshot.json` holds the last good table the
workers read (router.server.cache), so a router that starts while Redis is
down serves it, marked stale, and one that starts on a Redis that lost data
guards against it. It records the Redis it came from (bindings.identity): a
file from another Redis is set aside (renamed, said once) rather than served
or taken as proof of lost data.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from bindings.models import VersionedBinding

log = logging.getLogger("rolegate.cache")


@dataclass(frozen=True)
class Kept:
    """A table read from the file: its records, generation and origin (None: not recorded),
    and the version each archived role was archived at."""

    bindings: dict[str, VersionedBinding]
    generation: int
    redis: dict[str, str] | None
    archived: dict[str, int]


def save(path: Path, generation: int, bindings: dict[str, VersionedBinding],
         redis: dict[str, str], archived: dict[str, int]) -> None:
    """Keep `bindings` in `path`, atomically (a reader never sees half a file)."""
    payload = {"generation": generation, "saved_at": time.time(), "redis": redis,
               "roles": {role: rec.model_dump(mode="json") for role, rec in bindings.items()},
               "archived": archived}
    # Each worker writes its own temporary file; the rename is atomic.
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(payload, separators=(",", ":")))
        os.replace(temporary, path)
    except OSError as exc:
        log.warning("could not keep the binding table in %s: %s", path, exc)


def read(path: Path) -> Kept | None:
    """The table kept in `path`, or None (no file, or unreadable: said so)."""
    try:
        payload = json.loads(path.read_text())
        bindings = {role: VersionedBinding.model_validate(rec)
                    for role, rec in payload["roles"].items()}
        generation = int(payload["generation"])
        redis = payload.get("redis")
        if redis is not None and not (isinstance(redis, dict) and all(
                isinstance(v, str) for v in redis.values())):
            raise ValueError("its \"redis\" is not {\"address\", \"identity\"}")
        archived = {str(role): int(version)
                    for role, version in (payload.get("archived") or {}).items()}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ValidationError) as exc:
        log.error("the binding table kept in %s is unreadable: %s", path, exc)
        return None
    return Kept(bindings, generation, redis, archived)


def set_aside(path: Path, kept: Kept, address: str) -> None:
    """Rename a file kept from another Redis out of the way, and say so (once: one rename wins)."""
    target = path.with_name(f"{path.name}.other-redis-{int(time.time())}")
    try:
        os.replace(path, target)
    except FileNotFoundError:
        return  # another worker of this router set it aside first, and said so
    except OSError as exc:
        log.warning("could not set aside %s: %s", path, exc)
        return
    origin = (kept.redis or {}).get("address", "another Redis")
    log.warning("the binding table kept in %s came from %s, not this router's Redis (%s): "
                "set aside as %s, not served and not compared (%d roles, generation %d)",
                path, origin, address, target.name, len(kept.bindings), kept.generation)
