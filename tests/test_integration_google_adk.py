"""rolegate.integrations.google_adk with the real ADK, driven by a scripted BaseLlm."""

from __future__ import annotations

import pytest
from flask import Flask

from rolegate.integrations._common import NO_RESULT, UNOFFERED
from router.api.traces import trace_store
from tests.agent_support import ROLE, binding_stage, candidate_key, live_client

# One worker runs every test that imports google-adk (xdist_group): each
# worker that runs one pays its import, seconds of CPU.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("google_adk")]


def test_the_trace_is_what_the_run_did(app: Flask) -> None:
    """Calls in order with the transfer, a parallel group, agents, the refusal, tokens, output."""
    from tests.google_adk_kit import build, rg, run_once
    with live_client(app) as (_, client):
        executed: list[str] = []
        run = run_once(client, rg.protect(build(executed)), candidate_key())
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
    assert stored.tools == ("search", "lookup", "transfer_to_agent", "delete_account")
    assert stored.input == {"prompt": "refund order 7"}  # what the online judge reads
    assert stored.steps is not None
    search, lookup, transfer, delete = stored.steps
    assert search.parallel_group == lookup.parallel_group is not None
    assert search.result == ["refund-policy"] and lookup.result == {"id": 7}
    assert (transfer.agent, delete.agent, delete.parent_agent) == ("triage", "billing", "triage")
    assert delete.error == rg.REFUSED and stored.tool_errors == 1
    assert (stored.tokens_in, stored.tokens_out) == (10 + 20 + 10 + 20, 12)
    assert stored.output_text == "refunded"
    assert stored.stamps.model_id == "scripted-triage"
    assert "delete_account" not in executed


def test_no_forbidden_call_executes_and_the_attempt_rolls_the_canary_back(app: Flask) -> None:
    """before_tool_callback refuses delete_account before it runs; the canary rolls back."""
    from tests.google_adk_kit import build, rg, run_once
    with live_client(app) as (url, client):
        executed: list[str] = []
        for n in range(3):
            run_once(client, rg.protect(build(executed)), candidate_key(f"job{n}"))
        assert client.flush(10)
        assert executed.count("search") == 3 and "delete_account" not in executed
        assert binding_stage(url) == "rolled_back"


def test_an_unoffered_call_is_a_failed_step_and_trips_the_wire(app: Flask) -> None:
    """The model calls a tool the agent lacks (no role rule names it): a failed step; it trips."""
    from tests.google_adk_kit import LlmAgent, ScriptedLlm, call, rg, run_once, types
    executed: list[str] = []

    def search(q: str) -> list[str]:
        """Search the help center."""
        executed.append("search")
        return [q]

    agent = rg.protect(LlmAgent(name="support", tools=[search], model=ScriptedLlm(
        model="scripted", script=[[call("search", {"q": "refund"}, "c1"),
                                   call("wipe_cache", {"older_than": 7}, "c2")],
                                  [types.Part(text="done")]])))
    with live_client(app) as (url, client):
        run = run_once(client, agent, candidate_key())
        assert client.flush(10)
        stored = trace_store(app).lookup(ROLE, run.run_id).trace
        assert binding_stage(url) == "rolled_back"
    assert stored.tools == ("search", "wipe_cache") and stored.steps
    assert [s.error for s in stored.steps] == [None, UNOFFERED]
    assert [s.offered for s in stored.steps] == [None, False]  # the wire trips on this mark
    assert stored.steps[1].args == {"older_than": 7} and stored.output_text == "done"
    assert executed == ["search"] and stored.error is None


def test_an_aborted_run_is_reported_with_its_calls_and_error(app: Flask) -> None:
    """A raising tool ends the ADK run: the calls the callbacks saw, the error, still reported."""
    from tests.google_adk_kit import build, rg, run_once
    with live_client(app) as (_, client):
        with pytest.raises(RuntimeError, match="audit log full"):
            run_once(client, rg.protect(build([], crash=True)), candidate_key())
        assert client.flush(10)
        (stored,) = [t.trace for t in trace_store(app).read(ROLE, "cfg_b", "candidate")]
    assert stored.tools == ("search", "lookup", "transfer_to_agent", "delete_account", "audit")
    assert stored.steps is not None and stored.steps[-1].error == "RuntimeError: audit log full"
    assert stored.error is not None and stored.error.type == "RuntimeError"
    assert NO_RESULT not in {step.error for step in stored.steps[:2]}


def test_stamps_follow_the_agent_tree() -> None:
    """The same tree keeps its stamps; a sub-agent's new instruction or tool changes them."""
    from tests.google_adk_kit import build, rg
    agent = build([])
    first = rg.stamps(agent)
    assert rg.stamps(agent) == first == rg.stamps(build([]))
    billing = agent.sub_agents[0]
    billing.instruction = "Handle billing, and be quick."
    changed = rg.stamps(agent)
    assert changed["instruction_hash"] != first["instruction_hash"]
    assert changed["tool_schema_hash"] == first["tool_schema_hash"]
    billing.tools = [*billing.tools, lambda: None]
    assert rg.stamps(agent)["tool_schema_hash"] != first["tool_schema_hash"]
