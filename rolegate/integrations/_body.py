"""The tools a config body offers, paired with the functions that run them.

Every integration's `tools(body, implementations)` turns the resolved config's
tool list into its framework's tool objects with the body's own names,
descriptions and JSON schemas, so the agent is offered what is being rolled
out, not what the code happens to define.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple


class BodyTool(NamedTuple):
    """One tool of a config body and the function that runs it."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]


def body_tools(body: Mapping[str, Any] | None,
               implementations: Mapping[str, Callable[..., Any]]) -> list[BodyTool]:
    """The body's tools in its order; a ValueError for no body or a tool with no function.

    A function in `implementations` that the body does not name is left out: the
    config decides what the agent may call.
    """
    if not body:
        raise ValueError("the resolution has no body: register the config's body "
                         "(PUT /v1/configs/<id>) or build the tools yourself")
    found: list[BodyTool] = []
    for schema in body.get("tools", ()):
        name = schema["name"]
        function = implementations.get(name)
        if function is None:
            raise ValueError(f"the config's body offers tool {name!r} but no implementation "
                             f"was given (have: {', '.join(sorted(implementations)) or 'none'})")
        found.append(BodyTool(name, schema.get("description") or name,
                              dict(schema.get("parameters") or {"type": "object"}), function))
    return found
