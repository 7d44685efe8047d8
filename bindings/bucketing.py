"""A rollout's bucketing: drawn when the rollout begins, fixed while it routes.

Three fields of a binding decide which units a canary takes (`rolegate.routing`,
docs/bucketing.md): `bucket_by` (the unit: the job key, or a job attribute such
as the tenant), `salt` and `bucket_version` (the hash). A rollout begins when a
candidate is set (a create with a candidate, a replace naming another one), or
when a rolled-back candidate goes live again; it then draws its own salt, so the
units that were the canary of the last rollout are not the canary of every
rollout, and takes the newest hash. Within a rollout they stay put: raising the
share only adds units.

A write may name its own: a salt or version the write gives wins, when it
differs from the stored one (a read-modify-write that sends the old salt back
still draws) and from the default. Salt and version are drawn state, not
configuration: a write that leaves them out, or gives the defaults (`salt: null`,
`bucket_version: 1`, as a client that writes the whole model does, or a file
re-imported on every deploy), keeps the stored ones, or draws at a rollout's
start. So version 1 is what rollouts already running keep, and what every
rollout gets under the router's ROLEGATE_BUCKETING=1; a write never puts a new
rollout on it. `bucket_by` is configuration: a write that gives it (even null)
sets it; one that leaves it out keeps it, so a client that predates the field
cannot reset it. Changing any of them while
the same candidate routes traffic (canary or full) would move units between
arms mid-rollout, so it is refused (409). Imports (`rolegate serve --seed`) and
restores of an earlier version are taken as written.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Set

from bindings.errors import Conflict
from bindings.models import Binding, Stage

#: The binding fields that make up its bucketing.
FIELDS = ("bucket_by", "salt", "bucket_version")
#: The drawn fields' defaults: given, they name nothing (a whole-model write sends them).
DEFAULTS: dict[str, object] = {"salt": None, "bucket_version": 1}
#: Stages in which the candidate runs (shadow) or is served (canary, full).
LIVE = frozenset({Stage.SHADOW, Stage.CANARY, Stage.FULL})
#: Stages in which units are split between the arms.
ROUTING = frozenset({Stage.CANARY, Stage.FULL})


def new_salt() -> str:
    """A fresh salt: 16 hex digits (64 random bits)."""
    return secrets.token_hex(8)


def rollout_begins(old: Binding | None, new: Binding) -> bool:
    """Whether the write from `old` to `new` begins a rollout: a new candidate, or a re-run."""
    if new.candidate is None:
        return False
    if old is None or old.candidate != new.candidate:
        return True
    return old.stage is Stage.ROLLED_BACK and new.stage in LIVE


def with_bucketing(old: Binding | None, new: Binding, given: Set[str], *, version: int,
                   draw: Callable[[], str | None] = new_salt) -> Binding:
    """`new` as it is stored: its bucketing drawn, named or kept (see the module docstring).

    `given` is the set of fields the write named (a model's `model_fields_set`; empty
    for a stage move); `version` the bucketing version a rollout that begins gets,
    and `draw` its salt (None: unsalted, the router's ROLEGATE_BUCKETING=1).
    Raises Conflict when a write would change the bucketing of a routing rollout.
    """
    kept = {field: getattr(old, field) for field in FIELDS
            if old is not None and (field not in given or (
                field in DEFAULTS and getattr(new, field) == DEFAULTS[field]))}
    named = new.model_copy(update=kept) if kept else new
    if rollout_begins(old, named):
        changes: dict[str, object] = {}
        if not _named(old, named, given, "salt"):
            changes["salt"] = draw()
        if not _named(old, named, given, "bucket_version"):
            changes["bucket_version"] = version
        return named.model_copy(update=changes) if changes else named
    if (old is not None and old.stage in ROUTING and named.stage in ROUTING
            and old.candidate == named.candidate):
        moved = [field for field in FIELDS if getattr(old, field) != getattr(named, field)]
        if moved:
            raise Conflict(
                f"{', '.join(moved)}: cannot change while {named.candidate} is served to a "
                f"share of units (stage {old.stage.value!r}): it would move units between arms "
                "mid-rollout; roll back, or set a new candidate (a new rollout)",
                field=moved[0])
    return named


def _named(old: Binding | None, new: Binding, given: Set[str], field: str) -> bool:
    """Whether the write named `field` itself: given, not the default, and not just the stored
    value sent back."""
    value = getattr(new, field)
    if field not in given or value == DEFAULTS[field]:
        return False
    return old is None or value != getattr(old, field)
