"""The config registry in Redis: each config's spec, its body, and the criteria from the spec.

One hash per config, ``rolegate:config:{cfg_b}`` (the config id is its Redis
Cluster hash tag), holding a version counter and the record. Writes are a
compare-and-set (WATCH, read the version, MULTI, write) when the writer names the
version it read; a stale writer gets `Conflict` and nothing is written.

`policy_since` is when the config's criteria last changed (not when its wording
did): cases older than that were made under a different policy, and golden sets
leave them out.

The body (`rolegate.body`: model, instructions, tools; or messages) is also kept
in its own hash field, ``body``, so the binding snapshot reads bodies without
parsing whole records. Bodies travel in the binding snapshot, so changing one
bumps the change hint (`BindingStore.announce`) after the write, as a binding
change does: routers and subscribed clients pick up the new body the way they
pick up a rollout move.

A write changes only what it names: a spec registered alone keeps the body and
the description, a body alone keeps the spec and its criteria (`KEEP`). A write
that would drop a body, or offer a forbidden tool, in a config a live role
serves is refused before anything is written (`gatekeeper.checks.served`).
Every version's record is kept, ``rolegate:config:{cfg_b}:versions`` (version ->
record, in the config's slot), so an older one stays readable.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

import redis
from pydantic import BaseModel, ConfigDict, Field

from bindings.connection import Connection
from bindings.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    StoreUnavailable,
)
from bindings.store import BindingStore, _redis_errors, load_stored
from gatekeeper.checks.criteria import Criterion, diff, generate
from gatekeeper.checks.served import refusal
from gatekeeper.checks.spec import Spec
from rolegate.body import AgentBody, CompletionBody
from rolegate.config_ids import ConfigId, config_id_problem

CONFIG_KEY_TEMPLATE = "rolegate:config:{{{config}}}"
VERSIONS_KEY_TEMPLATE = "rolegate:config:{{{config}}}:versions"
CONFIGS_KEY = "rolegate:configs"


class _Keep(enum.Enum):
    KEEP = "keep"


#: A field of `ConfigStore.put` left as stored (a body, spec or description not sent).
KEEP: Final = _Keep.KEEP


class ConfigRecord(BaseModel):
    """A config as stored: its spec, its criteria, and when its policy last changed."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    config: ConfigId
    version: int = Field(ge=1)
    spec: Spec
    criteria: tuple[Criterion, ...]
    #: What the agent runs: model, instructions and tools (or messages); None without one.
    body: AgentBody | CompletionBody | None = Field(None, discriminator="mode")
    description: str = ""
    updated_at: float
    updated_by: str
    policy_since: float


def config_key(config: str) -> str:
    """The Redis key of a config's record."""
    return CONFIG_KEY_TEMPLATE.format(config=config)


def versions_key(config: str) -> str:
    """The Redis key of a config's records by version (every version written since 0.1)."""
    return VERSIONS_KEY_TEMPLATE.format(config=config)


def validate_config_id(config: str) -> str:
    """Return `config` if it is a usable config id (`rolegate.config_ids`), else raise InvalidInput."""
    problem = config_id_problem(config)
    if problem is not None:
        raise InvalidInput(problem, field="config")
    return config


class ConfigStore:
    """Reads and compare-and-set writes of config specs and their stored criteria."""

    def __init__(self, connection: Connection, clock: Callable[[], float] = time.time) -> None:
        self.connection = connection
        self.clock = clock

    def get(self, config: str) -> ConfigRecord:
        """The config's record; NotFound if it was never registered."""
        with _redis_errors():
            raw = self.connection.hget(config_key(validate_config_id(config)), "record")
        if raw is None:
            raise NotFound(f"no spec registered for config {config!r}", config=config)
        return _load(config, raw)

    def find(self, config: str) -> ConfigRecord | None:
        """The config's record, or None when it was never registered.

        An id outside the config-id rule was never registered either: None, not
        InvalidInput (a gate view reading a role's configs must not answer 422).
        """
        if config_id_problem(config) is not None:
            return None
        try:
            return self.get(config)
        except NotFound:
            return None

    def configs(self) -> list[str]:
        """Every registered config id, sorted."""
        with _redis_errors():
            members = sorted(m.decode() if isinstance(m, bytes) else m
                             for m in self.connection.smembers(CONFIGS_KEY))
            pipe = self.connection.pipeline(transaction=False)
            for config in members:
                pipe.exists(config_key(config))
            found = pipe.execute() if members else []
        # The index is written before the spec: a member whose write failed has no record.
        return [config for config, exists in zip(members, found) if exists]

    def bodies(self, configs: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The bodies of those of `configs` that have one, by config id, in one round trip."""
        ids = [c for c in dict.fromkeys(configs) if config_id_problem(c) is None]
        if not ids:
            return {}
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for config in ids:
                pipe.hget(config_key(config), "body")
            raws = pipe.execute()
        return {config: json.loads(raw) for config, raw in zip(ids, raws) if raw}

    def body_versions(self, configs: Iterable[str]) -> dict[str, int]:
        """Of those of `configs` that have a body, the version whose body it is, in one round trip.

        The version and the body are written in one MULTI (`put`), so the record at
        that version (`version`) holds the body read here; a write between the two reads
        bumps the change hint, and the next snapshot names the newer version.
        """
        ids = [c for c in dict.fromkeys(configs) if config_id_problem(c) is None]
        if not ids:
            return {}
        with _redis_errors():
            # Not a MULTI: each config is a slot of its own on a Cluster.
            pipe = self.connection.pipeline(transaction=False)
            for config in ids:
                pipe.hget(config_key(config), "version")
                pipe.hexists(config_key(config), "body")
            answers = pipe.execute()
        return {config: int(version) for config, version, has in
                zip(ids, answers[::2], answers[1::2]) if has and version is not None}

    def version(self, config: str, version: int) -> ConfigRecord:
        """The record `config` had at `version`; NotFound if that version was never kept.

        Every version written since versions were kept stays readable; the latest
        one is also read from the record itself (a config written before then).
        """
        key = config_key(validate_config_id(config))
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            pipe.hget(versions_key(config), str(version))
            pipe.hget(key, "record")
            raw, latest = pipe.execute()
        if raw is None and latest is not None:
            record = _load(config, latest)
            if record.version == version:
                return record
        if raw is None:
            raise NotFound(f"config {config!r} has no version {version} kept",
                           config=config, version=version)
        return _load(config, raw)

    def versions(self, config: str) -> list[ConfigRecord]:
        """Every kept version of `config`'s record, oldest first; NotFound if never registered."""
        latest = self.get(config)
        with _redis_errors():
            raws = self.connection.hvals(versions_key(config))
        kept = {record.version: record for record in (_load(config, raw) for raw in raws)}
        kept[latest.version] = latest
        return [kept[v] for v in sorted(kept)]

    def put(self, config: str, spec: Spec | None = None, *, actor: str,
            description: str | _Keep = KEEP,
            body: AgentBody | CompletionBody | None | _Keep = KEEP,
            expected_version: int | None = None) -> tuple[ConfigRecord, ConfigRecord | None]:
        """Store what the write names: (new record, previous record).

        `spec` (None: keep the stored one, or an empty spec) and the criteria
        generated from it; `body` (None drops it, KEEP keeps it); `description`.
        With `expected_version` (0 to create) the write is a compare-and-set.
        A body change that a live role's binding forbids (dropping its body, or
        offering a tool its invariants refuse) raises Conflict naming the roles,
        and nothing is written.
        """
        key = config_key(validate_config_id(config))
        try:
            # The roles that may serve the config, read before the write (other slots
            # on a Cluster): a binding written meanwhile is checked by its own write.
            bindings = {role: record.binding
                        for role, record in BindingStore(self.connection).snapshot()[1].items()}
            # The index first, in a step of its own (another slot than the spec's
            # key on a Cluster): it may name a config whose write then failed,
            # which reads back as "never registered", never the other way round.
            self.connection.sadd(CONFIGS_KEY, config)
            with self.connection.pipeline(transaction=True) as pipe:
                pipe.watch(key)
                raw = pipe.hget(key, "record")
                previous = _load(config, raw) if raw is not None else None
                current = previous.version if previous else 0
                if expected_version is not None and expected_version != current:
                    raise Conflict(
                        f"config {config!r} is at version {current}, not {expected_version}",
                        config=config, current_version=current,
                        expected_version=expected_version,
                    )
                spec = spec if spec is not None else previous.spec if previous else Spec()
                kept_body = previous.body if previous else None
                new_body = kept_body if body is KEEP else body
                refused = refusal(config, kept_body, new_body, bindings)
                if refused is not None:
                    raise refused
                criteria = tuple(generate(spec))
                now = self.clock()
                # Rewording keeps the policy; a changed check starts a new one.
                same_policy = previous is not None and diff(previous.criteria, criteria).empty
                record = ConfigRecord(
                    config=config, version=current + 1, spec=spec, criteria=criteria,
                    body=new_body,
                    description=(previous.description if previous else "")
                    if description is KEEP else description,
                    updated_at=now, updated_by=actor,
                    policy_since=previous.policy_since if same_policy and previous else now,
                )
                encoded = record.model_dump_json()
                pipe.multi()
                pipe.hset(key, mapping={"version": record.version, "record": encoded})
                if previous is not None:
                    # Kept already, unless it was written before versions were kept.
                    pipe.hsetnx(versions_key(config), str(previous.version),
                                previous.model_dump_json())
                pipe.hset(versions_key(config), str(record.version), encoded)
                if new_body is not None:
                    pipe.hset(key, "body", new_body.model_dump_json())
                else:
                    pipe.hdel(key, "body")
                pipe.execute()
        except redis.WatchError:
            raise Conflict(f"config {config!r} changed while it was being written",
                           config=config) from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise StoreUnavailable(f"Redis did not answer: {exc}") from exc
        if kept_body != new_body:
            # After the write, in a step of its own (another slot on a Cluster).
            BindingStore(self.connection).announce(f"config:{config}")
        return record, previous


def _load(config: str, raw: bytes | str) -> ConfigRecord:
    return load_stored(ConfigRecord, raw, f"stored record of config {config!r}", config=config)
