"""Which arm serves a job: a pure function of the binding, the role, the job key and its attributes.

Targeting comes first: a binding's ordered `rules` (`{"when": {"tenant": ["internal"]},
"arm": "candidate"}`) pick the arm from the job's attributes while a canary or full
stage is live, the first rule whose every attribute matches one of its values
winning; the answer then names the rule and the attributes that decided. Only a
job no rule picks is bucketed.

The bucket is a keyed hash of (role, unit), the same in every process and on every
host (never Python's salted `hash()`), so a unit is sticky to its arm, and a unit
goes to the candidate iff its bucket is below the share, so raising the share
only ever moves units from current to candidate (monotone). The unit is the job
key, or the value of the job attribute the binding names in `bucket_by` (every
job of one tenant gets one arm); a rollout's `salt` joins the hash, so each
rollout draws its own canary units; `bucket_version` names the hash function
(docs/bucketing.md: 1 BLAKE2b, the only one before versions existed; 2 XXH3,
five times cheaper). A job with no value for `bucket_by` is not bucketed: it is
served current (never a guess at its unit), and its answer says so. In `full` the share
is 1 - `holdback`: the keys whose bucket is at or above it stay on current
while the candidate bakes (a sticky holdback, the concurrent control the gate
compares with), the same keys that were on current in every canary step below it.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, NotRequired, Protocol, TypedDict

from xxhash import xxh3_64_intdigest

#: 2**64 buckets: far finer than the 1/10,000 resolution a share can ask for.
BUCKET_SPACE = float(1 << 64)

Arm = Literal["current", "candidate"]

#: The bucketing functions a binding may name (docs/bucketing.md); a binding written
#: before versions existed has none and buckets as 1.
BUCKET_VERSIONS = (1, 2)
#: What a rollout that begins now gets unless its write names another.
LATEST_BUCKET_VERSION = 2
_PERSON = b"rolegate"
#: A salt: at most 16 bytes (BLAKE2b's salt parameter), no NUL (version 2's separator).
SALT_PATTERN = r"^[A-Za-z0-9_.-]{1,16}$"


class Stage(str, enum.Enum):
    """Where a role's candidate stands in its rollout."""

    STABLE = "stable"
    SHADOW = "shadow"
    CANARY = "canary"
    FULL = "full"
    ROLLED_BACK = "rolled_back"


class RoutingRule(Protocol):
    """One targeting rule: when every named attribute has one of its values, serve `arm`."""

    @property
    def when(self) -> Mapping[str, Sequence[str]]: ...

    @property
    def arm(self) -> Arm: ...

    @property
    def name(self) -> str | None: ...


class Routable(Protocol):
    """The fields of a binding that decide an arm (the service's `Binding` has them)."""

    @property
    def rules(self) -> Sequence[RoutingRule]: ...

    @property
    def current(self) -> str: ...

    @property
    def candidate(self) -> str | None: ...

    @property
    def stage(self) -> Stage: ...

    @property
    def share(self) -> float: ...

    @property
    def holdback(self) -> float: ...

    @property
    def bucket_by(self) -> str | None: ...

    @property
    def salt(self) -> str | None: ...

    @property
    def bucket_version(self) -> int: ...


class Bucketing(TypedDict):
    """Which bucketing an answer used: what an SDK in another language must reproduce."""

    version: int
    #: The job attribute that is the unit; None: the job key.
    bucket_by: str | None
    salted: bool
    #: Only when the job was to be bucketed and had no value for `bucket_by`: it was
    #: served current, unbucketed (its unit is unknown, so it is in no rollout).
    unit_missing: NotRequired[bool]


class Resolution(TypedDict):
    """The answer to "which config serves role R for job K?"."""

    role: str
    config: str
    arm: Arm
    stage: str
    share: float
    shadow: str | None
    version: int
    key: str
    stale: bool
    #: The targeting rule's id when one picked the arm; the job's attributes that
    #: decided (the rule's) or name its unit (`bucket_by`'s): what a trace records.
    rule: NotRequired[str]
    attributes: NotRequired[dict[str, str]]
    #: How the job was (or would be) bucketed; its `bucket_by` attribute's value is in
    #: `attributes` too, so the run's trace carries its unit.
    bucketing: Bucketing
    #: In `full` only: the share of bucketed jobs kept on current (0: none).
    holdback: NotRequired[float]
    #: The run this assignment starts (`rolegate.run_ids`): report its trace under it and
    #: the report is matched to this assignment. HTTP and OFREP answer it whole; the SDK
    #: as `run_stem` and `run_seq` (`run_ids.run_id_of` joins them; its recorder does).
    run_id: NotRequired[str]
    run_stem: NotRequired[str | None]
    run_seq: NotRequired[int]


def routed_share(binding: Routable) -> float:
    """The share of bucketed jobs the candidate gets: the canary's share, in `full` all
    but the holdback, else none."""
    if binding.candidate is None:
        return 0.0
    if binding.stage is Stage.FULL:
        return 1.0 - binding.holdback
    return binding.share if binding.stage is Stage.CANARY else 0.0


def rule_id(rule: RoutingRule, index: int) -> str:
    """How a rule is named in answers, traces and `?rule=`: its name, else its position."""
    return rule.name if rule.name else str(index)


def matching_rule(rules: Sequence[RoutingRule],
                  attributes: Mapping[str, str]) -> tuple[str, RoutingRule] | None:
    """The first rule all of whose attributes `attributes` matches, with its id; None if none."""
    for index, rule in enumerate(rules):
        if all(attributes.get(name) in values for name, values in rule.when.items()):
            return rule_id(rule, index), rule
    return None


def bucket(role: str, key: str, *, salt: str | None = None, version: int = 1) -> float:
    """Map (role, unit `key`) to a point in [0, 1), uniformly and deterministically.

    Version 1: BLAKE2b-64 of role NUL key, personalised "rolegate", the salt (if
    any) in BLAKE2b's salt parameter. Version 2: XXH3-64 of role NUL salt NUL key
    (an empty salt when unsalted). docs/bucketing.md is the spec.
    """
    return bucketer(role, salt, version)(key)


@functools.lru_cache(maxsize=4096)
def bucketer(role: str, salt: str | None, version: int) -> Callable[[str], float]:
    """The bucket function of one role's bucketing, with its constant parts precomputed."""
    if version == 1:
        # NUL separates the parts so ("ab", "c") and ("a", "bc") never collide.
        prefix = f"{role}\x00"
        blake2b = hashlib.blake2b
        salt_bytes = salt.encode() if salt else b""  # b"": BLAKE2b's all-zero default

        def v1(key: str) -> float:
            digest = blake2b(f"{prefix}{key}".encode(), digest_size=8, person=_PERSON,
                             salt=salt_bytes).digest()
            return int.from_bytes(digest, "big") / BUCKET_SPACE
        return v1
    if version == 2:
        # Role and salt hold no NUL (their patterns), so the message parses one way.
        head = f"{role}\x00{salt or ''}\x00"

        def v2(key: str) -> float:
            return xxh3_64_intdigest(f"{head}{key}".encode()) / BUCKET_SPACE
        return v2
    raise ValueError(f"bucket_version {version} is not one of {BUCKET_VERSIONS}")


def bucketing_of(binding: Routable) -> Bucketing:
    """What a resolve under `binding` says about its bucketing."""
    return {"version": binding.bucket_version, "bucket_by": binding.bucket_by,
            "salted": binding.salt is not None}


def unit_of(binding: Routable, key: str, attributes: Mapping[str, str] | None) -> str | None:
    """The job's unit of randomisation: its key, or its `bucket_by` attribute (None: absent)."""
    if binding.bucket_by is None:
        return key
    return attributes.get(binding.bucket_by) if attributes else None


def binding_bucket(role: str, binding: Routable, unit: str) -> float:
    """The bucket of `unit` under `binding`'s bucketing (version and salt)."""
    return bucket(role, unit, salt=binding.salt, version=binding.bucket_version)


def new_key() -> str:
    """Draw a fresh random job key for a caller that gave none."""
    return secrets.token_hex(8)


def resolve(
    role: str, binding: Routable, version: int, key: str, *, stale: bool = False,
    attributes: Mapping[str, str] | None = None,
) -> Resolution:
    """Decide the arm for `key` (with the job's `attributes`) under `binding`. Pure."""
    stage = binding.stage
    candidate = binding.candidate
    arm: Arm = "current"
    decided: tuple[str, RoutingRule] | None = None
    bucketing = bucketing_of(binding)
    if candidate is not None and stage in (Stage.CANARY, Stage.FULL):
        if attributes and binding.rules:
            decided = matching_rule(binding.rules, attributes)
        if decided is not None:
            arm = decided[1].arm
        else:
            unit = unit_of(binding, key, attributes)
            if unit is None:
                bucketing["unit_missing"] = True
            elif binding_bucket(role, binding, unit) < routed_share(binding):
                arm = "candidate"
    answer: Resolution = {
        "role": role,
        "config": candidate if arm == "candidate" and candidate is not None else binding.current,
        "arm": arm,
        "stage": stage.value,
        "share": binding.share,
        "shadow": candidate if stage is Stage.SHADOW else None,
        "version": version,
        "key": key,
        "stale": stale,
        "bucketing": bucketing,
    }
    if stage is Stage.FULL:
        answer["holdback"] = binding.holdback
    named: dict[str, str] = {}
    if decided is not None and attributes is not None:
        answer["rule"] = decided[0]
        named = {name: attributes[name] for name in decided[1].when}
    by = binding.bucket_by
    if by is not None and attributes and by in attributes:
        named[by] = attributes[by]  # the unit, for the analysis of the run's trace
    if named:
        answer["attributes"] = named
    return answer
