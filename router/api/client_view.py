"""The client's view of a binding: what resolving reads, without the gate policy (issue 38).

`GET /v1/bindings` and its watch answer callers with this view by default, so an
SDK holding a thousand roles holds a few hundred bytes per role, not each role's
whole gate policy. `?view=full` keeps the operator's answer: every field of every
record, as `GET /v1/bindings/<role>` gives it.

The view drops named operator-only fields rather than listing the routing ones,
so a field a later change adds to the binding for routing reaches clients
without touching this module. The tool rules the SDK's `Client.allowed` applies
stay, in their place under `gate.invariants`, so an older client reads the slim
view as it read the full one.
"""

from __future__ import annotations

from typing import Any

from bindings.models import VersionedBinding

#: The views `?view=` names: `client` (the default) and `full`.
VIEWS = ("client", "full")
#: How `?bodies=` has config bodies carried: `inline` (the default: every body in the
#: answer's `bodies`) or `versions` (`body_versions`: each body's config version, for a
#: client that fetches a body the first time it needs it, GET /v1/configs/<id>/versions/<n>).
BODY_MODES = ("inline", "versions")
#: Binding fields no resolver reads: rollout plan, hold state, notes and retention.
OPERATOR_FIELDS = frozenset({"gate", "steps", "paused", "approved", "description",
                             "trace_retention"})
#: Record fields beside the binding no resolver reads.
RECORD_OPERATOR_FIELDS = frozenset({"updated_at", "updated_by"})


def client_record(record: VersionedBinding) -> dict[str, Any]:
    """One role's record as a client resolves it: routing fields, stage start, tool rules."""
    full = record.model_dump(mode="json")
    binding = {name: value for name, value in full["binding"].items()
               if name not in OPERATOR_FIELDS}
    if not binding.get("rules"):
        binding.pop("rules", None)
    tools = _tool_rules(full["binding"]["gate"]["invariants"])
    if tools:
        binding["gate"] = {"invariants": tools}
    out = {name: value for name, value in full.items() if name not in RECORD_OPERATOR_FIELDS}
    out["binding"] = binding
    return out


def _tool_rules(invariants: dict[str, Any]) -> dict[str, Any]:
    """The invariants a client enforces before a tool runs, where they say anything."""
    tools: dict[str, Any] = {}
    if invariants.get("forbidden_tools"):
        tools["forbidden_tools"] = invariants["forbidden_tools"]
    if invariants.get("allowed_tools") is not None:
        tools["allowed_tools"] = invariants["allowed_tools"]
    return tools
