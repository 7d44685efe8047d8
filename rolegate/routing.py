"""Which arm serves a job: a pure function of the binding, the role, the job key and its attributes.

Targeting comes first: a binding's ordered `rules` (`{"when": {"tenant": ["internal"]},
"arm": "candidate"}`) pick the arm from the job's attributes while a canary or full
stage is live, the first rule whose every attribute matches one of its values
winning; the answer then names the rule and the attributes that decided. Only a
job no rule picks is bucketed.

The bucket is a keyed hash of (role, key), the same in every process and on every
host (never Python's salted `hash()`), so a key is sticky to its arm, and a key
goes to the candidate iff its bucket is below the share, so raising the share
only ever moves keys from current to candidate (monotone). In `full` the share
is 1 - `holdback`: the keys whose bucket is at or above it stay on current
while the candidate bakes (a sticky holdback, the concurrent control the gate
compares with), the same keys that were on current in every canary step below it.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from collections.abc import Mapping, Sequence
from typing import Literal, NotRequired, Protocol, TypedDict

#: 2**64 buckets: far finer than the 1/10,000 resolution a share can ask for.
BUCKET_SPACE = float(1 << 64)

Arm = Literal["current", "candidate"]


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
    #: Only when a targeting rule picked the arm: the rule's id, and the job's
    #: attributes the rule read (what a trace records as having decided).
    rule: NotRequired[str]
    attributes: NotRequired[dict[str, str]]
    #: In `full` only: the share of bucketed jobs kept on current (0: none).
    holdback: NotRequired[float]


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


def bucket(role: str, key: str) -> float:
    """Map (role, key) to a point in [0, 1), uniformly and deterministically."""
    # NUL separates the parts so ("ab", "c") and ("a", "bc") never collide.
    digest = hashlib.blake2b(
        f"{role}\x00{key}".encode(), digest_size=8, person=b"rolegate"
    ).digest()
    return int.from_bytes(digest, "big") / BUCKET_SPACE


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
    if candidate is not None and stage in (Stage.CANARY, Stage.FULL):
        if attributes and binding.rules:
            decided = matching_rule(binding.rules, attributes)
        if decided is not None:
            arm = decided[1].arm
        elif bucket(role, key) < routed_share(binding):
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
    }
    if stage is Stage.FULL:
        answer["holdback"] = binding.holdback
    if decided is not None and attributes is not None:
        answer["rule"] = decided[0]
        answer["attributes"] = {name: attributes[name] for name in decided[1].when}
    return answer
