"""Graded responses: per gate rule, roll back (the default), hold for a human, or only warn.

Teams adopting a new check want to watch it before it acts (the usual advice for a
new allowlist: start it wide and observe first), and Argo Rollouts users asked for pause
instead of abort (argo-rollouts#2866); GrowthBook and Statsig let a guardrail
metric alert without stopping an experiment. So each of decide()'s rules that
would roll back has a key, and `gate.responses` maps a key to what happens:

- `rollback` (default): as before;
- `hold`: the rollout stops where it is and waits for a human: the gatekeeper
  pauses the role with the reason, and an operator promotes, rolls back or
  resumes it;
- `warn`: recorded in the decision (`details.warnings`), notified once, and the
  rule has no effect: decide() goes on as if it had passed.

A forbidden tool call under a zero `max_forbidden_rate` is always a rollback,
whatever the policy says (and the router's tripwire rolls it back at ingest
anyway).

Keys (RULES): `gate` (zero-tolerance reasons: a lost required tool, a blocking
criterion), `drift` (a CUSUM alarm on the candidate), `shadow` (a pair that lost a
required tool), `sequential` (the rollout's e-value), `criteria` (a criterion's
sequential test; `criterion:<key>` names one key), `stage_end` (a rated reason at
the stage's one look: p95 steps, mean cost, a non-zero forbidden-rate limit),
`mcnemar` (the exact McNemar test at the stage's end), `vs_current` (the unpaired
comparison with current at the stage's end).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bindings.responses_policy import RESPONSE_NAMES, RESPONSE_RULES

#: The responses, most drastic first: the binding model's own list.
RESPONSES = RESPONSE_NAMES
ROLLBACK, HOLD, WARN = RESPONSES
RULES = RESPONSE_RULES
CRITERION_PREFIX = "criterion:"
#: How a policy hold starts its reason (next_step and the loop key on it).
HELD = "held by policy"


class Responder:
    """What one decide() call does with each rule that would roll back; collects warnings."""

    def __init__(self, responses: Mapping[str, str], *, forbidden: bool) -> None:
        self.responses = responses
        #: A forbidden call under a zero limit is in the evidence: `gate` always rolls back.
        self.forbidden = forbidden
        self.warnings: list[dict[str, Any]] = []

    def response(self, rule: str, criteria: Iterable[str] = ()) -> tuple[str, str]:
        """(response, the policy entry that chose it) for `rule` (and its criterion keys)."""
        if rule == "gate" and self.forbidden:
            return ROLLBACK, "forbidden tools always roll back"
        chosen: list[tuple[str, str]] = []
        for key in criteria:
            name = CRITERION_PREFIX + key
            if name in self.responses:
                chosen.append((self.responses[name], f"gate.responses[{name!r}]"))
        if not chosen and rule in self.responses:
            chosen.append((self.responses[rule], f"gate.responses[{rule!r}]"))
        if not chosen:
            return ROLLBACK, "default"
        # Several criteria at once: the most drastic response among theirs.
        return min(chosen, key=lambda c: RESPONSES.index(c[0]))

    def warn(self, rule: str, source: str, reason: str) -> None:
        """Record a rule that would have rolled back and was only to warn."""
        self.warnings.append({"rule": rule, "policy": source, "reason": reason})


def response_details(rule: str, applied: str, source: str) -> dict[str, Any]:
    """What the decision's details say about the response applied."""
    return {"response": {"rule": rule, "applied": applied, "policy": source}}
