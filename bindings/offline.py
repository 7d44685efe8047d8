"""Offline suite verdicts in Redis, per (role, candidate config).

`rolegate suite run --post` stores the suite's verdict here; the transition into
shadow reads it when the role's gate policy sets `require_offline_pass`. The
role is the Redis Cluster hash tag, like every other key of the role.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bindings.connection import Connection
from bindings.errors import NotFound
from bindings.store import _redis_errors, load_stored
from rolegate.config_ids import ConfigId
from rolegate.trace import JsonInt

OFFLINE_KEY_TEMPLATE = "rolegate:{{{role}}}:offline:{config}"
#: The configs of a role that have a stored verdict.
OFFLINE_INDEX_KEY_TEMPLATE = "rolegate:{{{role}}}:offline-index"


class OfflineVerdict(BaseModel):
    """What a suite run says about one config (the body of POST .../offline)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: ConfigId
    # strict: 0 is not a verdict.
    passed: bool = Field(strict=True)
    reasons: list[str] = Field(default_factory=list, max_length=1000)
    suite: str = Field("", max_length=2000)
    config_hash: str = Field("", max_length=200)
    planned_runs: JsonInt = Field(0, ge=0)
    completed_runs: JsonInt = Field(0, ge=0)
    stopped: str | None = Field(None, max_length=2000)
    #: Scenario id -> {"verdict", "pass_rate", ...}: enough to read the verdict later.
    scenarios: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: The baseline comparison, when the suite was run as one.
    comparison: dict[str, Any] | None = None


class StoredOfflineVerdict(BaseModel):
    """A verdict as stored: with its role, when and by whom."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    role: str
    verdict: OfflineVerdict
    time: float
    actor: str


def offline_key(role: str, config: str) -> str:
    """The key holding the verdict of `config` for `role`."""
    return OFFLINE_KEY_TEMPLATE.format(role=role, config=config)


def offline_index_key(role: str) -> str:
    """The set of configs of `role` with a stored verdict."""
    return OFFLINE_INDEX_KEY_TEMPLATE.format(role=role)


class OfflineStore:
    """Reads and writes offline verdicts; the latest verdict for a config wins."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def put(self, role: str, verdict: OfflineVerdict, actor: str,
            now: float | None = None) -> StoredOfflineVerdict:
        """Store `verdict` for (role, verdict.config), replacing any earlier one."""
        stored = StoredOfflineVerdict(role=role, verdict=verdict,
                                      time=time.time() if now is None else now, actor=actor)
        with _redis_errors(), self.connection.pipeline(transaction=True) as pipe:
            pipe.set(offline_key(role, verdict.config), stored.model_dump_json())
            pipe.sadd(offline_index_key(role), verdict.config)
            pipe.execute()
        return stored

    def get(self, role: str, config: str) -> StoredOfflineVerdict:
        """The verdict for (role, config); NotFound when none was posted."""
        with _redis_errors():
            raw = self.connection.get(offline_key(role, config))
        if raw is None:
            raise NotFound(f"no offline suite verdict for role {role!r}, config {config!r}",
                           role=role, config=config)
        return load_stored(StoredOfflineVerdict, raw, f"stored offline verdict of role {role!r}, "
                           f"config {config!r}", role=role, config=config)

    def all(self, role: str) -> list[StoredOfflineVerdict]:
        """Every stored verdict of `role`, by config name."""
        with _redis_errors():
            configs = sorted(c.decode() if isinstance(c, bytes) else c
                             for c in self.connection.smembers(offline_index_key(role)))
        found = []
        for config in configs:
            try:
                found.append(self.get(role, config))
            except NotFound:
                continue
        return found
