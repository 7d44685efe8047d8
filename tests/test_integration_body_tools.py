"""Each integration's tools(body, implementations): the model is offered the body's schemas."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rolegate.integrations import google_adk, langgraph, openai_agents, pydantic_ai

pytestmark = pytest.mark.slow

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


def test_pydantic_ai_offers_the_body_schema() -> None:
    """Tool.from_schema: name, description and JSON schema are the body's."""
    (tool,) = pydantic_ai.tools(BODY, IMPLEMENTATIONS)
    assert (tool.name, tool.description) == ("read_file", "Read a workspace file.")
    assert tool.function_schema.json_schema == SCHEMA


def test_openai_agents_offers_the_body_schema() -> None:
    """function_tool renamed and described as the body says, with its params_json_schema."""
    (tool,) = openai_agents.tools(BODY, IMPLEMENTATIONS)
    assert (tool.name, tool.description) == ("read_file", "Read a workspace file.")
    assert tool.params_json_schema == SCHEMA


def test_google_adk_declares_the_body_schema_not_the_signature() -> None:
    """The declaration carries the body's JSON schema; the call runs the function."""
    (tool,) = google_adk.tools(BODY, IMPLEMENTATIONS)
    declaration = tool._get_declaration()
    assert declaration is not None and declaration.name == "read_file"
    assert declaration.description == "Read a workspace file."
    assert declaration.parameters_json_schema == SCHEMA
    assert asyncio.run(tool.run_async(args={"path": "a.md"}, tool_context=None)) == "read a.md"  # type: ignore[arg-type]


def test_langgraph_offers_the_body_schema() -> None:
    """StructuredTool with the body's JSON schema as args_schema."""
    (tool,) = langgraph.tools(BODY, IMPLEMENTATIONS)
    assert tool.tool_call_schema["properties"] == SCHEMA["properties"]  # type: ignore[index]
    assert tool.invoke({"path": "b.md"}) == "read b.md"


@pytest.mark.parametrize("module", [pydantic_ai, openai_agents, google_adk, langgraph])
def test_a_body_tool_without_a_function_is_refused(module: Any) -> None:
    """A tool the body offers but no implementation runs: a ValueError naming it."""
    with pytest.raises(ValueError, match="read_file"):
        module.tools(BODY, {"send_email": never})
    with pytest.raises(ValueError, match="no body"):
        module.tools(None, IMPLEMENTATIONS)
