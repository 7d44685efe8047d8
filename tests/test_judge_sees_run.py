"""The online judge sees the run: a real pydantic-ai run's input, and its steps when asked.

A run recorded through the pydantic-ai integration is reported to the real router,
sampled for the role's judge, claimed by the gatekeeper's judging code and asked of
the loopback judge (tests/judge_server.py); the test reads the request the judge got.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import requests
from flask import Flask

from gatekeeper.judging import Judges, judge_tick
from rolegate import Client
from rolegate.http import ApiClient
from tests.agent_support import own_event_loop
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.judge_server import JudgeServer, judge_server
from tests.servers import werkzeug_server

if TYPE_CHECKING:
    from pydantic_ai import Agent

# One worker runs every test that imports pydantic-ai (xdist_group): each
# worker that runs one pays its import, seconds of CPU.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pydantic_ai")]

ROLE = "refunds"
KEY_ENV = "ROLEGATE_TEST_JUDGE_KEY"


@pytest.fixture(autouse=True)
def event_loop_per_test() -> Iterator[None]:
    """pydantic-ai's run_sync gets its own default event loop."""
    with own_event_loop():
        yield


def agent() -> Agent[None, str]:
    """Looks order 7 up, then answers."""
    # pydantic-ai is imported when a test runs, not at collection (seconds of CPU in
    # every pytest-xdist worker).
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from rolegate.integrations import pydantic_ai as rg

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookupOrder", {"id": 7})])
        return ModelResponse(parts=[TextPart("Order 7 is refunded in full.")])

    made = Agent(FunctionModel(script, model_name="scripted"), name="refunds",
                 capabilities=[rg.Guard()])

    @made.tool_plain
    def lookupOrder(id: int) -> dict[str, Any]:
        """Fetch the order."""
        return {"id": id, "total": 30, "status": "delivered"}

    return made


def judged_request(app: Flask, *, trajectory: bool) -> str:
    """Run the agent once under a judged role; the user message the judge was sent."""
    spec = {"instructions": [
        {"id": "grounded", "text": "Refund only what the looked-up order holds.",
         "trajectory": trajectory},
        {"id": "tone", "text": "Be brief and polite."}]}
    with werkzeug_server(app) as url, judge_server() as judge:
        r = requests.put(f"{url}/v1/configs/refunds_v1", json={"spec": spec},
                         headers=auth(OPERATOR), timeout=5)
        assert r.status_code == 201, r.text
        gate = {"judge": {"url": judge.url, "model": "judge-1", "sample_rate": 1.0,
                          "api_key_env": KEY_ENV, "timeout_s": 30.0}}
        r = requests.put(f"{url}/v1/bindings/{ROLE}", json={"current": "refunds_v1",
                                                            "gate": gate},
                         headers=auth(OPERATOR), timeout=5)
        assert r.status_code == 201, r.text
        client = Client(url, CALLER)
        try:
            from rolegate.integrations import pydantic_ai as rg

            made = agent()
            with client.recorder(client.resolve(ROLE, "order-7"),
                                 stamps=rg.stamps(made)) as run, rg.guard(client, run):
                rg.record(run, made.run_sync("Refund order 7, the parcel never came."))
            assert client.flush(10)
        finally:
            client.close()
        api = ApiClient(url, GATEKEEPER, attempts=2)
        try:
            assert judge_tick(api, time.time(), Judges(environ={KEY_ENV: "k"}), rounds=3) == 1
        finally:
            api.close()
        return only_request(judge)


def only_request(judge: JudgeServer) -> str:
    """The user message of the judge's one request."""
    assert len(judge.requests) == 1
    return str(judge.requests[0]["messages"][-1]["content"])


def test_the_judge_reads_the_runs_input_and_its_steps_when_a_criterion_asks(app: Flask) -> None:
    """INPUT holds the prompt the integration recorded; TRAJECTORY the call, args and result."""
    user = judged_request(app, trajectory=True)
    given = user.split("INPUT:\n", 1)[1].split("\n\n", 1)[0]
    assert json.loads(given) == {"prompt": "Refund order 7, the parcel never came."}
    steps = json.loads(user.split("TRAJECTORY:\n", 1)[1].split("\n\nOUTPUT:", 1)[0])
    assert [(s["tool"], s["args"], s["error"]) for s in steps] == [
        ("lookupOrder", {"id": 7}, None)]
    assert json.loads(steps[0]["result"]) == {"id": 7, "total": 30, "status": "delivered"}
    assert "Order 7 is refunded in full." in user.split("OUTPUT:\n", 1)[1]


def test_without_a_trajectory_criterion_the_judge_sees_no_steps(app: Flask) -> None:
    """No criterion asks for the trajectory: the input and output only (fewer tokens)."""
    user = judged_request(app, trajectory=False)
    assert "Refund order 7" in user.split("INPUT:\n", 1)[1].split("\n\nOUTPUT:", 1)[0]
    assert "TRAJECTORY:" not in user and "lookupOrder" not in user
