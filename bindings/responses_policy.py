"""Graded responses' names (`gate.responses`): which rules may be answered, and with what.

Pure data, kept beside `bindings.models` (whose `GatePolicy.responses` it types and
checks) so each stays one concern. `gatekeeper.machine.responses` applies them; the
router's OpenAPI enums and the binding's JSON schema are generated from these tuples,
so a rule or response added here is named everywhere it is described.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal, get_args

#: decide()'s rules that can roll back, as `gate.responses` names them
#: (`gatekeeper.machine.responses` says what each is).
RESPONSE_RULES = ("gate", "drift", "shadow", "sequential", "criteria", "stage_end", "mcnemar",
                  "vs_current", "reports", "units")
#: What a response does, most drastic first (decide() takes the worst of several by it).
ResponseName = Literal["rollback", "hold", "warn"]
RESPONSE_NAMES: tuple[str, ...] = get_args(ResponseName)
#: A `gate.responses` key: a rule, or `criterion:<key>` (the JSON schema's propertyNames).
RESPONSE_KEY_PATTERN = "^(" + "|".join(RESPONSE_RULES) + "|criterion:.+)$"


def check_response_keys(value: Mapping[str, str]) -> dict[str, str]:
    """`value` when every key names a rule (or `criterion:<key>`); ValueError naming one that
    does not, with the rules it could be."""
    for key in value:
        if not re.fullmatch(RESPONSE_KEY_PATTERN, key, re.S):
            raise ValueError(f"responses: {key!r} is not a rule; use one of "
                             f"{', '.join(RESPONSE_RULES)} or criterion:<key>")
    return dict(value)
