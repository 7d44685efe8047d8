"""How much evidence a rollout needs before it moves on (`gate.power`). Pure data.

The gate rolls a candidate back on evidence that it is worse; absence of that
evidence after a few dozen runs is not evidence that it is fine. A role whose
current config passes 0.5 of its runs, or fails 1 run in 1,000, needs
thousands of runs before a drop worth catching can show, more than a 15-minute
stage at low traffic holds. So a stage may advance only once the comparison
the gate runs would have caught the smallest regression worth catching with
chance `min_power` (`gatekeeper.stats.power`): a drop of `drop` in the pass
rate, or the failure rate times `risk` where that is the smaller rise, but
never a rise under `min_rise` (a config that never fails cannot show a tenfold
rise of nothing). Until then the stage holds and says how far it is; the stage
deadline ends a wait that traffic cannot end.

Kept beside `bindings.models` (which imports it into `GatePolicy`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rolegate.trace import JsonNumber


class PowerPolicy(BaseModel):
    """The regression every promotion must first have been able to catch."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    #: The chance the gate's comparison would have rolled back a candidate worse by
    #: the regression below, over the rollout's runs so far, before a stage advances
    #: (0: no power hold).
    min_power: JsonNumber = Field(0.9, ge=0.0, lt=1.0)
    #: A drop in the pass rate worth catching (absolute: 0.05 is 0.95 -> 0.90).
    drop: JsonNumber = Field(0.05, gt=0.0, lt=1.0)
    #: ... or a failure rate this many times current's, where that rise is smaller
    #: (rare failures: 0.999 -> 0.99 is tenfold); None: the drop alone.
    risk: JsonNumber | None = Field(10.0, gt=1.0, le=1000.0)
    #: The smallest rise in the failure rate the hold asks the gate to see.
    min_rise: JsonNumber = Field(0.01, gt=0.0, lt=1.0)
