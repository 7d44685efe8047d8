"""Which arm serves a job: a pure function of the binding, the role and the job key.

The bucket is a keyed hash of (role, key), the same in every process and on every
host (never Python's salted `hash()`), so a key is sticky to its arm, and a key
goes to the candidate iff its bucket is below the share, so raising the share
only ever moves keys from current to candidate (monotone).
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from typing import Literal, Protocol, TypedDict

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


class Routable(Protocol):
    """The fields of a binding that decide an arm (the service's `Binding` has them)."""

    @property
    def current(self) -> str: ...

    @property
    def candidate(self) -> str | None: ...

    @property
    def stage(self) -> Stage: ...

    @property
    def share(self) -> float: ...


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
    role: str, binding: Routable, version: int, key: str, *, stale: bool = False
) -> Resolution:
    """Decide the arm for `key` under `binding`. Pure: same inputs, same answer."""
    stage = binding.stage
    candidate = binding.candidate
    arm: Arm = "current"
    if candidate is not None and stage in (Stage.CANARY, Stage.FULL):
        if stage is Stage.FULL or bucket(role, key) < binding.share:
            arm = "candidate"
    return {
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
