"""A snapshot of the binding table as a client holds it, precompiled for resolving.

The client reads only the fields that route a job (`rolegate.routed.RoutedBinding`); each record
is kept as received (compressed), so a saved snapshot is a complete
`GET /v1/bindings` body that can bootstrap another client.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rolegate.body import body_hashes, lacking
from rolegate.exposures import Exposures, epoch_of
from rolegate.fast_bucket import inline_split
from rolegate.routed import ALLOW_ALL, NO_TOOL_RULES, RoutedRecord, ToolGate
from rolegate.routing import (
    BUCKET_VERSIONS,
    Resolution,
    Stage,
    bucketer,
    resolve,
    routed_share,
)

log = logging.getLogger("rolegate.client")

#: One role, precompiled: (current answer, candidate answer or None, share, bucket of a
#: key). With a candidate answer, a key goes to it iff bucket_of(key) < share; a bucket_of
#: of None: the role buckets by an attribute, so it is resolved in full (`Snapshot.targeted`).
Entry = tuple[dict[str, Any], dict[str, Any] | None, float, Callable[[str], float] | None]
#: One role as `Client.resolve` reads it, in one lookup: the first answer; the second
#: (None: every key gets the first); the message head and integer cut of an inlined
#: version-2 split (`rolegate.fast_bucket`; None and the share otherwise); the exposure
#: counters of the first and second answers (the first's again without a second) and of
#: the shadow (None outside shadow); the stage epoch they count under; and the entry's
#: bucket_of (None: the role is resolved in full, `Snapshot.targeted`).
Fast = tuple[dict[str, Any], dict[str, Any] | None, str | None, Any, "itertools.count[int]",
             "itertools.count[int]", "itertools.count[int] | None", str,
             Callable[[str], float] | None]


class Snapshot:
    """One generation of the binding table, precompiled for resolving.

    What it keeps is what resolving reads: per role one `Fast` tuple (the two
    precompiled answers, the split, the exposure counters and the stage epoch),
    the tool rules of the roles that have any (`gates`), and the records of roles
    resolved in full (targeting rules, `bucket_by`: `records`). The table as
    received is kept compressed for `to_json` and `save` (rarely read), not as a
    dict per role: a client of a thousand roles holds under 2 KB per role
    (bench/peers.py, tests/test_client_view.py).

    Counters: a new snapshot counts into an exposures table of its own until
    `count_with` gives it the client's (before the client publishes it).
    """

    __slots__ = ("_packed", "bodies", "body_stamps", "body_versions", "entries", "gates",
                 "generation", "pending", "records")

    def __init__(self, generation: int, raw: Mapping[str, Mapping[str, Any]],
                 bodies: Mapping[str, Mapping[str, Any]] | None = None,
                 body_versions: Mapping[str, int] | None = None) -> None:
        self.generation = generation
        #: Config bodies by config id: each role's current and candidate that have one
        #: (with `body_versions`, those at hand: fetched on demand, `rolegate.body_cache`).
        self.bodies = {config: dict(body) for config, body in (bodies or {}).items()}
        #: {config: the config version whose body it is}, of a table read with
        #: `?bodies=versions`; empty for one that carries every body.
        self.body_versions = dict(body_versions or {})
        #: Roles whose answers wait for a body not at hand yet: `supply` moves each to
        #: `entries` once it is (Client.resolve fetches it the first time it is needed).
        self.pending: dict[str, Fast] = {}
        #: Per role, what `Client.resolve` reads, in one lookup.
        self.entries: dict[str, Fast] = {}
        #: Tool rules of the roles that have any; every other known role allows every tool.
        self.gates: dict[str, ToolGate] = {}
        #: The records of the roles `targeted` resolves in full.
        self.records: dict[str, RoutedRecord] = {}
        own = Exposures()
        for role, record in raw.items():
            routed = RoutedRecord.model_validate(record)
            if routed.role != role:
                raise ValueError(f"snapshot lists role {routed.role!r} under {role!r}")
            binding = routed.binding
            first, second, share, bucket_of = compile_role(role, routed, self.bodies)
            inline = None
            if second is not None and bucket_of is not None:
                inline = inline_split(role, binding.salt, binding.bucket_version, share,
                                      bucket_of)
            fast = _counted(own, role, (first, second, *(inline or (None, share))),
                            epoch_of(binding.stage_since), bucket_of)
            waits = self.body_versions and lacking(fast, self.bodies, self.body_versions)
            (self.pending if waits else self.entries)[role] = fast
            if binding.gate.invariants != NO_TOOL_RULES:
                self.gates[role] = ToolGate(binding.gate.invariants)
            if binding.known_bucketing and (binding.rules or binding.bucket_by):
                self.records[role] = routed
        if self.body_versions:
            # Keyed by the answers' own config strings: a thousand roles name two thousand.
            named = {a["config"]: a["config"] for fast in (*self.entries.values(),
                                                            *self.pending.values())
                     for a in fast[:2] if a is not None}
            self.body_versions = {named.get(c, c): v for c, v in self.body_versions.items()}
        self._packed = zlib.compress(json.dumps(raw, separators=(",", ":")).encode(), 1)
        #: Per config with a body, the stamps it decides (computed once per snapshot).
        self.body_stamps = _body_stamps(self.bodies)

    @property
    def raw(self) -> dict[str, dict[str, Any]]:
        """Each role's record as received (unpacked anew on each read)."""
        records: dict[str, dict[str, Any]] = json.loads(zlib.decompress(self._packed))
        return records

    def count_with(self, exposures: Exposures) -> None:
        """Count this snapshot's assignments in `exposures` (the client's) from now on."""
        self.pending = {role: _counted(exposures, role, entry[:4], entry[7], entry[8])
                        for role, entry in self.pending.items()}
        self.entries = {role: _counted(exposures, role, entry[:4], entry[7], entry[8])
                        for role, entry in self.entries.items()}

    def supply(self, bodies: Mapping[str, dict[str, Any]]) -> None:
        """Take config bodies fetched on demand: each pending role they complete is served.

        A role's answers get their bodies before it enters `entries` (what resolving
        reads without a lock): no resolve ever sees an answer without its body.
        """
        for config, body in bodies.items():
            self.bodies[config] = body
            self.body_stamps.update(_body_stamps({config: body}))
        for role, fast in list(self.pending.items()):
            if not lacking(fast, self.bodies, self.body_versions):
                _attach_bodies(fast, self.bodies)  # type: ignore[arg-type]
                self.entries[role] = fast
                del self.pending[role]

    def roles(self) -> list[str]:
        """Every role the snapshot knows, its pending ones included."""
        return sorted([*self.entries, *self.pending])

    def gate(self, role: str) -> ToolGate | None:
        """The role's tool rules (the allow-all gate when it has none); None for no such role."""
        gate = self.gates.get(role)
        if gate is None and (role in self.entries or role in self.pending):
            return ALLOW_ALL
        return gate

    @classmethod
    def from_json(cls, body: Any) -> Snapshot:
        """Read the body of `GET /v1/bindings`: {"generation", "roles": {role: record}}."""
        if not isinstance(body, Mapping) or not isinstance(body.get("roles"), Mapping):
            raise ValueError('a bindings snapshot is {"generation": N, "roles": {role: record}}')
        generation = int(body.get("generation", 0))
        bodies = body.get("bodies") or {}
        if not isinstance(bodies, Mapping) or not all(
                isinstance(b, Mapping) for b in bodies.values()):
            raise ValueError('a snapshot\'s "bodies" is {config: body}')
        versions = body.get("body_versions") or {}
        if not isinstance(versions, Mapping) or not all(
                type(v) is int for v in versions.values()):
            raise ValueError('a snapshot\'s "body_versions" is {config: version}')
        return cls(generation, body["roles"], bodies, versions)

    def targeted(self, role: str, key: str, attributes: Mapping[str, str] | None,
                 stale: bool) -> Resolution | None:
        """The answer for a job when `role` has targeting rules or buckets by an attribute.

        Rules and `bucket_by` make the answer depend on more than the key's bucket:
        the full `rolegate.routing.resolve`, the one the router runs for
        `?attr.<name>=`. None when the key alone decides (the precompiled entry).
        """
        record = self.records.get(role)
        if record is None:
            return None
        if not (record.binding.bucket_by or (attributes and record.binding.rules)):
            return None
        answer = resolve(role, record.binding, record.version, key, stale=stale,
                         attributes=attributes)
        attach_body(answer, self.bodies)  # type: ignore[arg-type]
        return answer

    def to_json(self) -> dict[str, Any]:
        """The snapshot in the shape of `GET /v1/bindings` (usable as a bootstrap)."""
        out: dict[str, Any] = {"generation": self.generation, "roles": self.raw}
        if self.bodies:
            out["bodies"] = self.bodies  # with `body_versions`: the bodies fetched so far
        if self.body_versions:
            out["body_versions"] = self.body_versions
        return out

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the snapshot to `path` atomically, for a later bootstrap."""
        target = Path(path)
        temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(self.to_json(), separators=(",", ":")))
        # Rename, so a crash mid-write never leaves a half file to start from.
        temporary.replace(target)

    @classmethod
    def load(cls, source: str | os.PathLike[str] | Mapping[str, Any]) -> Snapshot:
        """A snapshot from a `GET /v1/bindings` body or a file holding one."""
        if isinstance(source, Mapping):
            return cls.from_json(source)
        path = Path(source)
        try:
            body = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"snapshot file {str(path)!r} is unreadable: {exc}") from exc
        return cls.from_json(body)


def _counted(exposures: Exposures, role: str, split: tuple[Any, Any, Any, Any], epoch: str,
             bucket_of: Callable[[str], float] | None) -> Fast:
    """A role's answers and split with `exposures`' counters for each answer (and shadow)."""
    first, second = split[0], split[1]
    shadow = first.get("shadow")
    counter = exposures.counter(role, first["config"], first["arm"], epoch)
    return (*split, counter,
            counter if second is None else exposures.counter(role, second["config"],
                                                             second["arm"], epoch),
            None if not shadow else exposures.counter(role, shadow, "shadow", epoch), epoch,
            bucket_of)


def compile_role(role: str, record: RoutedRecord,
                 bodies: Mapping[str, Mapping[str, Any]] | None = None) -> Entry:
    """Precompute a role's answers so resolving is one hash, one compare and one copy.

    The answers are built from `rolegate.routing.resolve` itself and checked
    against it on probe keys, so a change to the server's routing cannot
    silently diverge from this shortcut: the snapshot is refused instead (the
    client keeps its last one and says stale).
    """
    binding = record.binding
    if not binding.known_bucketing:
        # A newer router's hash this SDK cannot compute: serve current, the arm that is
        # safe to serve anyone, rather than a unit's arm it would get wrong.
        log.error("role %r: bucket_version %s is unknown to this SDK (it knows %s): serving "
                  "current until the SDK is upgraded", role, binding.bucket_version,
                  list(BUCKET_VERSIONS))
        fallback = binding.model_copy(update={"bucket_version": 1, "candidate": None,
                                              "stage": Stage.STABLE, "share": 0.0})
        answer = resolve(role, fallback, record.version, "")
        answer["stage"] = binding.stage.value
        answer["bucketing"] = {"version": binding.bucket_version,
                               "bucket_by": binding.bucket_by,
                               "salted": binding.salt is not None, "unit_missing": True}
        return ({**answer}, None, 0.0, None)
    answer = resolve(role, binding, record.version, "")
    answer["bucketing"].pop("unit_missing", None)  # the key "" stood in for any job's
    # One object per distinct bucketing, not one per role (most roles share one).
    bucketing = answer["bucketing"]
    answer["bucketing"] = _BUCKETINGS.setdefault(
        (bucketing["version"], bucketing["bucket_by"], bucketing["salted"]), bucketing)
    answer.pop("attributes", None)
    bucket_of = None if binding.bucket_by else bucketer(role, binding.salt,
                                                          binding.bucket_version)
    current = {**answer, "arm": "current", "config": binding.current}
    entry: Entry = (current, None, 0.0, bucket_of)
    if binding.candidate is not None and binding.stage in (Stage.CANARY, Stage.FULL):
        candidate = {**answer, "arm": "candidate", "config": binding.candidate}
        share = routed_share(binding)
        entry = ((candidate, None, 0.0, bucket_of) if share >= 1.0
                 else (current, candidate, share, bucket_of))
    for probe in () if binding.bucket_by else _PROBE_KEYS:
        expected = resolve(role, binding, record.version, probe)
        if _answer(role, entry, probe, False) != expected:
            log.error("client routing disagrees with rolegate.routing for %r", role)
            raise ValueError(f"client routing disagrees with rolegate.routing for {role!r}")
    if bodies:
        # After the probes: a body is extra information, not part of the routing answer.
        _attach_bodies(entry, bodies)
    return entry


#: The bucketing answers carry, shared: (version, bucket_by, salted) -> {...}.
_BUCKETINGS: dict[tuple[int, str | None, bool], Any] = {}


def _body_stamps(bodies: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for config, body in bodies.items():
        try:
            out[config] = body_hashes(dict(body))
        except ValueError as exc:  # the router validated it; a newer body format, maybe
            log.warning("config %r: its body does not parse here, no stamps from it: %s",
                        config, exc)
    return out


def _attach_bodies(entry: Entry, bodies: Mapping[str, Mapping[str, Any]]) -> None:
    """Put each answer's config body (and its shadow's) on it, where the snapshot has one."""
    for answer in entry[:2]:
        if isinstance(answer, dict):
            attach_body(answer, bodies)


def attach_body(answer: dict[str, Any], bodies: Mapping[str, Mapping[str, Any]]) -> None:
    """Put the answer's config body (and its shadow's) on it, where `bodies` has one."""
    body = bodies.get(answer["config"])
    if body is not None:
        answer["body"] = body
    shadow = answer.get("shadow")
    if shadow is not None and shadow in bodies:
        answer["shadow_body"] = bodies[shadow]


def _answer(role: str, entry: Entry, key: str, stale: bool) -> dict[str, Any]:
    current, candidate, share, bucket_of = entry
    answer = (candidate if candidate is not None and bucket_of is not None
              and bucket_of(key) < share else current).copy()
    answer["key"] = key
    answer["stale"] = stale
    return answer


#: Enough keys that a canary of 10% almost surely has some on each arm.
_PROBE_KEYS = tuple(f"probe-{n}" for n in range(24))


def starting_snapshot(bootstrap: str | os.PathLike[str] | Mapping[str, Any] | None,
                       saved: Path | None) -> Snapshot | None:
    """What to answer from before the router does: the newer of bootstrap and saved file.

    A bad bootstrap raises (the caller gave it); a bad saved file is logged and
    skipped (the client wrote it, and will write a good one).
    """
    start = Snapshot.load(bootstrap) if bootstrap is not None else None
    if saved is not None and saved.exists():
        try:
            disk = Snapshot.load(saved)
        except ValueError as exc:
            log.warning("ignoring the saved snapshot %s: %s", saved, exc)
            return start
        if start is None or disk.generation > start.generation:
            return disk
    return start
