"""What a config write may not do to the roles that serve the config. Pure: data in, data out.

A config's body is what its runs do (model, instructions, tools). A role serves a
config while its binding routes real jobs to it: always its current config, and its
candidate in shadow, canary or full. A write to such a config must keep each
promise the binding write keeps: the body a live role serves is never dropped (its
agents read `body` from every resolution), and it never offers a tool the role's
invariants forbid or its allowlist lacks (a framework that hides the tool from the
model would never call it, so no run would trip the wire).

`refusal` says why a write is refused, naming the roles, or None; the store raises
it before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping

from bindings.errors import Conflict
from bindings.models import Binding, Stage
from gatekeeper.checks.invariants import offered_breaches
from rolegate.body import AgentBody, CompletionBody

Body = AgentBody | CompletionBody

#: Stages in which a candidate runs on real jobs (shadow included: it sees real input).
LIVE = frozenset({Stage.SHADOW, Stage.CANARY, Stage.FULL})


def served_arms(binding: Binding) -> dict[str, str]:
    """The configs `binding` routes real jobs to, each with its arm ("current", "candidate")."""
    arms = {binding.current: "current"}
    if binding.candidate is not None and binding.stage in LIVE:
        arms[binding.candidate] = "candidate"
    return arms


def serving(bindings: Mapping[str, Binding], config: str) -> dict[str, str]:
    """Role -> how it serves `config` ("current", "candidate in canary", ...), by role name."""
    out = {}
    for role, binding in sorted(bindings.items()):
        arm = served_arms(binding).get(config)
        if arm == "current":
            out[role] = "current"
        elif arm is not None:
            out[role] = f"candidate in {binding.stage.value}"
    return out


def offered_tools(body: Body | None) -> tuple[str, ...]:
    """The names of the tools `body` offers its model (none for a completion body)."""
    return tuple(tool.name for tool in body.tools) if isinstance(body, AgentBody) else ()


def refusal(config: str, previous: Body | None, new: Body | None,
            bindings: Mapping[str, Binding]) -> Conflict | None:
    """Why writing `new` over `previous` as `config`'s body is refused, or None.

    Only a change of the body is judged: a write that keeps it (a spec registered
    beside it) adds no risk the roles did not already run.
    """
    if new == previous:
        return None
    roles = serving(bindings, config)
    if not roles:
        return None
    named = ", ".join(f"{role} ({how})" for role, how in roles.items())
    if new is None:
        return Conflict(
            f"config {config!r} has a body that live roles serve: {named}; their agents read "
            "it from every resolution, so a write may not drop it. Send the body with the "
            "write (or leave `body` out to keep it), or move the roles off the config first",
            config=config, refused="body_dropped", roles=sorted(roles))
    by_role = {role: list(breaches) for role in roles
               if (breaches := offered_breaches(bindings[role].gate.invariants,
                                                offered_tools(new)))}
    if not by_role:
        return None
    tools = sorted({tool for breaches in by_role.values() for tool in breaches})
    where = "; ".join(f"{role} ({roles[role]}) may not run {tools_of}"
                      for role, tools_of in by_role.items())
    return Conflict(
        f"config {config!r} may not offer {tools}: live roles serve it and their invariants "
        f"forbid those tools or their allowed_tools lack them: {where}. Remove the tools from "
        "the body or change the roles' gates first",
        config=config, refused="offered_tools", roles=sorted(by_role), tools=tools,
        by_role=by_role)
