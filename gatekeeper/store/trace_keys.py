"""Key names of the trace store, and where a stored run lives.

Module-level templates (never built inline); the role is the Redis Cluster hash
tag in every key, so one ingest script touches a single slot. See
`gatekeeper.store.traces` for what each key holds.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from bindings.models import Binding

STREAM_KEY_TEMPLATE = "rolegate:{{{role}}}:traces:{config}:{arm}"
WINDOW_KEY_TEMPLATE = "rolegate:{{{role}}}:window:{config}:{arm}:{epoch}"
#: Which reporters sent a run id, and where each one's trace is stored (a hash:
#: reporter name, "" for an unstamped trace -> location JSON). Dedupe is per
#: reporter: another token's trace under the same run id never shadows one's own.
CLAIMS_KEY_TEMPLATE = "rolegate:{{{role}}}:claims:{run_id}"
#: Before run ids were claimed per reporter: one string, the location. Still read
#: (never written) until the last of these expires, RUN_TTL_S after an upgrade.
LEGACY_RUN_KEY_TEMPLATE = "rolegate:{{{role}}}:run:{run_id}"
TALLY_KEY_TEMPLATE = "rolegate:{{{role}}}:tools:{config}"
CONFIGS_KEY_TEMPLATE = "rolegate:{{{role}}}:configs"
#: One reporter's share of a stage's window, and the set of reporters that have one.
REPORTER_WINDOW_KEY_TEMPLATE = "rolegate:{{{role}}}:window:{config}:{arm}:{epoch}:by:{reporter}"
REPORTERS_KEY_TEMPLATE = "rolegate:{{{role}}}:reporters:{config}:{arm}:{epoch}"
#: Increments stored but not yet folded into the window (`gatekeeper.store.window_fold`).
PENDING_KEY_TEMPLATE = "rolegate:{{{role}}}:pending:{config}:{arm}:{epoch}"
#: The cells of closed buckets moved out of the window (`gatekeeper.store.window_closed`).
CLOSED_KEY_TEMPLATE = "rolegate:{{{role}}}:window:{config}:{arm}:{epoch}:closed"


def stream_key(role: str, config: str, arm: str) -> str:
    """The stream holding one (role, config, arm)'s traces, oldest first."""
    return STREAM_KEY_TEMPLATE.format(role=role, config=config, arm=arm)


def window_key(role: str, config: str, arm: str, epoch: str) -> str:
    """The running aggregate of one (role, config, arm) over one stage."""
    return WINDOW_KEY_TEMPLATE.format(role=role, config=config, arm=arm, epoch=epoch)


def reporter_window_key(role: str, config: str, arm: str, epoch: str, reporter: str) -> str:
    """The running aggregate of the traces one reporter sent for (role, config, arm) in a stage."""
    return REPORTER_WINDOW_KEY_TEMPLATE.format(role=role, config=config, arm=arm, epoch=epoch,
                                               reporter=reporter)


def reporters_key(role: str, config: str, arm: str, epoch: str) -> str:
    """The names of the reporters with a window for (role, config, arm) in a stage."""
    return REPORTERS_KEY_TEMPLATE.format(role=role, config=config, arm=arm, epoch=epoch)


def pending_key(role: str, config: str, arm: str, epoch: str) -> str:
    """The increments of (role, config, arm)'s traces in a stage not yet folded into its window."""
    return PENDING_KEY_TEMPLATE.format(role=role, config=config, arm=arm, epoch=epoch)


def closed_key(role: str, config: str, arm: str, epoch: str) -> str:
    """The closed buckets' cells of (role, config, arm)'s window in a stage, kept apart."""
    return CLOSED_KEY_TEMPLATE.format(role=role, config=config, arm=arm, epoch=epoch)


def claims_key(role: str, run_id: str) -> str:
    """Where each reporter's trace of a run id is kept (it makes ingest idempotent per reporter)."""
    return CLAIMS_KEY_TEMPLATE.format(role=role, run_id=run_id)


def legacy_run_key(role: str, run_id: str) -> str:
    """A run id's location as stored before claims were per reporter (read only)."""
    return LEGACY_RUN_KEY_TEMPLATE.format(role=role, run_id=run_id)


def tally_key(role: str, config: str) -> str:
    """A config's all-time tool tally."""
    return TALLY_KEY_TEMPLATE.format(role=role, config=config)


def configs_key(role: str) -> str:
    """The set of configs that reported traces for a role."""
    return CONFIGS_KEY_TEMPLATE.format(role=role)


def epoch_of(binding: Binding | None) -> str:
    """The window epoch of a binding's current stage: its stage_since, fixed-format."""
    since = binding.stage_since if binding is not None else None
    return "0" if since is None else f"{since:.6f}"


def stream_id_time(stream_id: str) -> float:
    """The arrival time (epoch seconds) encoded in a stream id."""
    return int(stream_id.split("-", 1)[0]) / 1000


# Immutable as a NamedTuple rather than a frozen dataclass: ingest builds one per trace,
# and a frozen dataclass sets each field through object.__setattr__ (about 5x the cost).
class Location(NamedTuple):
    """Where a run is stored: its (config, arm) stream, stream id and window epoch."""

    config: str
    arm: str
    epoch: str
    id: str

    @classmethod
    def parse(cls, raw: str) -> Location:
        """Read a location as the ingest script stored it."""
        data = json.loads(raw)
        return cls(config=data["config"], arm=data["arm"], epoch=data["epoch"], id=data["id"])
