"""Scoreable criteria generated from an agent's spec, and the check of one on one trace.

Pure: no Flask, no Redis. A criterion's key is made of the requirement's identity
(the schema path, the tool, the rule's id), never of its wording, so rewording an
instruction keeps its key while a different requirement gets a different one:

    output:/customer/email     a required output field is present and typed
    actions:allowed            every tool called is one the spec allows
    tool:verifyIdentity        a required tool is called
    escalation:<rule id>       when the rule's condition holds, its demand is met
    instruction:<id>           an instruction is followed (judge)
    knowledge:<id>             answers agree with a knowledge-base document (judge)

`check` answers True or False where the spec allows a deterministic answer, and
None when the criterion does not apply to this trace or only the judge can tell.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from gatekeeper.checks.spec import Spec, holds, lookup

CheckKind = Literal["output_field", "allowed_actions", "required_tool", "escalation", "judge"]
DESCRIPTION_LIMIT = 160
#: Python's view of each JSON Schema type (bool is excluded from the numbers below).
_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,),
    "object": (dict,), "array": (list,), "null": (type(None),),
}


class Scorable(Protocol):
    """What a check reads of a run; `rolegate.trace.Trace` is one."""

    @property
    def tools(self) -> Sequence[str]:
        """Tool names in call order."""

    @property
    def output_text(self) -> str:
        """The run's output."""

    @property
    def input(self) -> dict[str, Any] | None:
        """The job's input, when the run carried it."""


class Criterion(BaseModel):
    """One behaviour a judge or a check can score: its key, wording, and how it is checked."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(min_length=1, max_length=300)
    description: str = Field(min_length=1, max_length=DESCRIPTION_LIMIT)
    kind: CheckKind
    #: What the check compares against; a change here is a change of the requirement.
    params: dict[str, Any] = Field(default_factory=dict)
    #: A judge criterion the judge can only score from what the run did: the online
    #: judge is shown the run's trajectory (each step's tool, arguments, result and
    #: error) beside its input and output. Off by default: it costs tokens.
    trajectory: bool = False

    @property
    def deterministic(self) -> bool:
        """True when `check` can decide it without a judge."""
        return self.kind != "judge"


class Change(BaseModel):
    """One key present on both sides of a diff whose check or wording differs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    before: Criterion
    after: Criterion


class CriteriaDiff(BaseModel):
    """What changed between two criteria sets, by key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    added: tuple[Criterion, ...] = ()
    removed: tuple[Criterion, ...] = ()
    #: Same key, different check (kind or params): results before and after differ in meaning.
    changed: tuple[Change, ...] = ()
    #: Same key and check, new wording only: results still line up.
    reworded: tuple[Change, ...] = ()

    @property
    def empty(self) -> bool:
        """True when the two sets check exactly the same things."""
        return not (self.added or self.removed or self.changed)


# -- generation ---------------------------------------------------------------


def generate(spec: Spec) -> list[Criterion]:
    """Turn a spec into criteria, deterministic checks first, in a stable order."""
    out: list[Criterion] = []
    if spec.output_schema is not None:
        out.extend(_field_criteria(spec.output_schema, [], anchor=0))
    if spec.tools is not None:
        allowed = sorted(t.name for t in spec.tools)
        out.append(Criterion(
            key="actions:allowed",
            description=_line("every action taken is an allowed one: " + (", ".join(allowed)
                                                                            or "none")),
            kind="allowed_actions", params={"allowed": allowed},
        ))
        for tool in sorted(spec.tools, key=lambda t: t.name):
            if tool.required:
                out.append(Criterion(
                    key=f"tool:{tool.name}", description=_line(f"calls {tool.name}"),
                    kind="required_tool", params={"tool": tool.name},
                ))
    for rule in spec.escalation:
        demand = " and ".join(
            part for part in (f"calls {rule.tool}" if rule.tool else "",
                              f"answers {rule.answer!r}" if rule.answer else "") if part
        )
        params: dict[str, Any] = {
            "tool": rule.tool, "answer": rule.answer, "answer_field": rule.answer_field,
        }
        if rule.when:
            params["when"] = [c.model_dump(mode="json") for c in rule.when]
        out.append(Criterion(
            key=f"escalation:{rule.id}",
            description=_line(f"when {rule.condition}: {demand}"),
            # Without machine-readable conditions only a judge can tell if the rule applied.
            kind="escalation" if rule.when else "judge",
            params=params,
        ))
    for item in spec.instructions:
        out.append(Criterion(key=f"instruction:{item.id}", description=_line(item.text),
                             kind="judge", params={}, trajectory=item.trajectory))
    for ref in spec.knowledge:
        out.append(Criterion(
            key=f"knowledge:{ref.id}",
            description=_line(f"answers agree with the knowledge base: {ref.title}"),
            kind="judge", params={"uri": ref.uri} if ref.uri else {}, trajectory=ref.trajectory,
        ))
    return out


def _field_criteria(schema: dict[str, Any], path: list[str], *, anchor: int) -> list[Criterion]:
    """Criteria for every required property, recursing into object properties.

    `anchor` is the length of the deepest optional ancestor's path: when that
    ancestor is absent the nested requirement does not apply (check gives None).
    """
    out: list[Criterion] = []
    required = set(schema.get("required", []))
    properties: dict[str, Any] = schema.get("properties", {})
    for name in sorted(set(properties) | required):
        sub = properties.get(name, {})
        sub_path = [*path, name]
        sub_anchor = anchor if name in required else len(sub_path)
        if name in required:
            kind = sub.get("type")
            types = sorted(kind) if isinstance(kind, list) else [kind] if kind else []
            params: dict[str, Any] = {"path": sub_path, "types": types, "anchor": anchor}
            wording = f"output field {'.'.join(sub_path)} is present"
            if types:
                wording += " and a " + " or ".join(types)
            if "enum" in sub:
                params["enum"] = list(sub["enum"])
                wording += " from " + ", ".join(json.dumps(v) for v in sub["enum"])
            out.append(Criterion(key="output:/" + "/".join(sub_path),
                                 description=_line(wording), kind="output_field", params=params))
        if isinstance(sub, dict) and (sub.get("properties") or sub.get("required")):
            out.extend(_field_criteria(sub, sub_path, anchor=sub_anchor))
    return out


def _line(text: str) -> str:
    """Collapse whitespace into one line and cut it to the description limit."""
    flat = " ".join(text.split())
    return flat if len(flat) <= DESCRIPTION_LIMIT else flat[: DESCRIPTION_LIMIT - 1] + "…"


# -- checking -----------------------------------------------------------------


class _Missing:
    """The output did not parse as JSON (distinct from a JSON null)."""


MISSING = _Missing()


def parse_output(text: str) -> Any:
    """The output text as JSON, or MISSING when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return MISSING


def check(criterion: Criterion, trace: Scorable, *, output: Any = None) -> bool | None:
    """Whether `trace` meets `criterion`: True, False, or None (not applicable, or judge).

    `output` is the parsed output when the caller already parsed it (see `evaluate`).
    """
    params = criterion.params
    if criterion.kind == "judge":
        return None
    if criterion.kind == "allowed_actions":
        allowed = set(params["allowed"])
        return all(tool in allowed for tool in trace.tools)
    if criterion.kind == "required_tool":
        return params["tool"] in trace.tools
    parsed = parse_output(trace.output_text) if output is None else output
    if criterion.kind == "output_field":
        return _field_check(params, parsed)
    return _escalation_check(params, trace, parsed)


def _field_check(params: Mapping[str, Any], output: Any) -> bool | None:
    if not isinstance(output, dict):
        # Structured output was required and none came back.
        return False if params["anchor"] == 0 else None
    node: Any = output
    for depth, part in enumerate(params["path"]):
        if not isinstance(node, dict) or part not in node:
            # Under an absent optional ancestor the requirement does not apply.
            return None if depth < params["anchor"] else False
        node = node[part]
    types: list[str] = params["types"]
    if types and not any(_is_type(node, t) for t in types):
        return False
    return "enum" not in params or node in params["enum"]


def _is_type(value: Any, json_type: str) -> bool:
    if isinstance(value, bool) and json_type in ("number", "integer"):
        return False
    if json_type == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _PY_TYPES.get(json_type, (object,)))


def _escalation_check(params: Mapping[str, Any], trace: Scorable, output: Any) -> bool | None:
    if trace.input is None:
        return None
    # Stored params were validated as Clauses when generated: read them as they are.
    if not all(holds(c["field"], c["op"], c.get("value"), trace.input)
               for c in params.get("when", [])):
        return None
    if params.get("tool") and params["tool"] not in trace.tools:
        return False
    answer = params.get("answer")
    if answer is not None:
        if params.get("answer_field"):
            found, value = lookup(output, params["answer_field"])
            return found and value == answer
        return answer.casefold() in trace.output_text.casefold()
    return True


def evaluate(criteria: Iterable[Criterion], trace: Scorable) -> dict[str, bool | None]:
    """Every criterion's verdict on one trace, keyed by criterion key."""
    output = parse_output(trace.output_text)
    return {c.key: check(c, trace, output=output) for c in criteria}


# -- diff ---------------------------------------------------------------------


def diff(old: Iterable[Criterion], new: Iterable[Criterion]) -> CriteriaDiff:
    """Criteria added, removed, changed (same key, different check) and reworded."""
    before = {c.key: c for c in old}
    after = {c.key: c for c in new}
    changed, reworded = [], []
    for key in sorted(before.keys() & after.keys()):
        a, b = before[key], after[key]
        # What the judge is shown is part of the check: its answers may change with it.
        if (a.kind, a.params, a.trajectory) != (b.kind, b.params, b.trajectory):
            changed.append(Change(key=key, before=a, after=b))
        elif a.description != b.description:
            reworded.append(Change(key=key, before=a, after=b))
    return CriteriaDiff(
        added=tuple(after[k] for k in sorted(after.keys() - before.keys())),
        removed=tuple(before[k] for k in sorted(before.keys() - after.keys())),
        changed=tuple(changed),
        reworded=tuple(reworded),
    )
