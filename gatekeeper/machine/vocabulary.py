"""The words the gatekeeper answers in: its actions and a rollout's states. Pure.

Here, apart from decide() and next_step, so the gate view's model
(`gatekeeper.view_model`), which the machine reads, can name them too: the
OpenAPI enums are generated from these and nothing else (the kinds of wait are
`machine.holds.WAIT_KINDS`, beside the holds).
"""

from __future__ import annotations

import enum


class Action(str, enum.Enum):
    """What the gatekeeper does to a role this tick."""

    ADVANCE = "advance"
    ROLLBACK = "rollback"
    HOLD = "hold"
    SKIP = "skip"


#: What a role's rollout is doing, as one word a script can branch on.
WAITING, ADVANCING, ROLLING_BACK, PAUSED = "waiting", "advancing", "rolling_back", "paused"
#: The gate passed on a step that asks a human first (`{"share": 0.5, "approval": true}`).
AWAITING_APPROVAL = "awaiting_approval"
#: gate.responses held the rollout: a rule would have rolled it back.
HELD = "held"
STABLE, ROLLED_BACK, NOT_STARTED = "stable", "rolled_back", "not_started"
#: Every state `next.state` takes: the OpenAPI enum is this tuple.
STATES = (WAITING, ADVANCING, ROLLING_BACK, PAUSED, AWAITING_APPROVAL, HELD, STABLE,
          ROLLED_BACK, NOT_STARTED)
