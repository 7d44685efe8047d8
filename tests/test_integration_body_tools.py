"""Each integration's tools(body, implementations): the model is offered the body's schemas."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest

pytestmark = pytest.mark.slow

# Each test imports its integration (and so its framework) when it runs, not at
# collection: the four frameworks take seconds of CPU in every pytest-xdist worker. A
# test runs on the worker that runs its framework's other tests (xdist_group).

SCHEMA = {"type": "object", "required": ["path"],
          "properties": {"path": {"type": "string", "description": "Workspace-relative."}}}
BODY = {"model": {"name": "m"}, "instructions": "Summarize.",
        "tools": [{"name": "read_file", "description": "Read a workspace file.",
                   "parameters": SCHEMA}]}


def read_file(path: str) -> str:
    """A docstring the body's description replaces."""
    return f"read {path}"


def never(**kwargs: Any) -> str:
    raise AssertionError("not in the body: never offered")


IMPLEMENTATIONS = {"read_file": read_file, "send_email": never}


@pytest.mark.xdist_group("pydantic_ai")
def test_pydantic_ai_offers_the_body_schema() -> None:
    """Tool.from_schema: name, description and JSON schema are the body's."""
    from rolegate.integrations import pydantic_ai
    (tool,) = pydantic_ai.tools(BODY, IMPLEMENTATIONS)
    assert (tool.name, tool.description) == ("read_file", "Read a workspace file.")
    assert tool.function_schema.json_schema == SCHEMA


@pytest.mark.xdist_group("openai_agents")
def test_openai_agents_offers_the_body_schema() -> None:
    """function_tool renamed and described as the body says, with its params_json_schema."""
    from rolegate.integrations import openai_agents
    (tool,) = openai_agents.tools(BODY, IMPLEMENTATIONS)
    assert (tool.name, tool.description) == ("read_file", "Read a workspace file.")
    assert tool.params_json_schema == SCHEMA


@pytest.mark.xdist_group("google_adk")
def test_google_adk_declares_the_body_schema_not_the_signature() -> None:
    """The declaration carries the body's JSON schema; the call runs the function."""
    from rolegate.integrations import google_adk
    (tool,) = google_adk.tools(BODY, IMPLEMENTATIONS)
    declaration = tool._get_declaration()
    assert declaration is not None and declaration.name == "read_file"
    assert declaration.description == "Read a workspace file."
    assert declaration.parameters_json_schema == SCHEMA
    assert asyncio.run(tool.run_async(args={"path": "a.md"}, tool_context=None)) == "read a.md"  # type: ignore[arg-type]


@pytest.mark.xdist_group("langgraph")
def test_langgraph_offers_the_body_schema() -> None:
    """StructuredTool with the body's JSON schema as args_schema."""
    from rolegate.integrations import langgraph
    (tool,) = langgraph.tools(BODY, IMPLEMENTATIONS)
    assert tool.tool_call_schema["properties"] == SCHEMA["properties"]  # type: ignore[index]
    assert tool.invoke({"path": "b.md"}) == "read b.md"


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.xdist_group(name))
                                  for name in ("pydantic_ai", "openai_agents", "google_adk",
                                               "langgraph")])
def test_a_body_tool_without_a_function_is_refused(name: str) -> None:
    """A tool the body offers but no implementation runs: a ValueError naming it."""
    module = importlib.import_module(f"rolegate.integrations.{name}")
    with pytest.raises(ValueError, match="read_file"):
        module.tools(BODY, {"send_email": never})
    with pytest.raises(ValueError, match="no body"):
        module.tools(None, IMPLEMENTATIONS)
