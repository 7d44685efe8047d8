"""Pause and approval hold every writer: the router refuses the move, whoever asks.

Issue 33: a gatekeeper token promoted past a step with `"approval": true` that nobody
had approved (200, moved to 0.5): approval was checked only inside the gatekeeper
process. The stage machine now refuses it where the write lands, so the gatekeeper's
own HTTP client, an operator's token, the CLI and a replace all meet the same 409,
and nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from click.testing import CliRunner
from flask import Flask

from bindings.errors import IllegalTransition
from bindings.models import Binding, CanaryStep, Stage
from gatekeeper.machine.next_step import destination
from gatekeeper.machine.stages import Event, apply
from rolegate.http import ApiClient, ApiError
from router.cli.main import main
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.servers import werkzeug_server

WAITING = {"current": "cfg-a", "candidate": "cfg-b", "stage": "canary", "share": 0.1,
           "steps": [{"share": 0.1, "approval": True}, 0.5]}
RUNNING = {"current": "cfg-a", "candidate": "cfg-b", "stage": "canary", "share": 0.1,
           "steps": [0.1, 0.5]}


@pytest.fixture
def url(app: Flask) -> Iterator[str]:
    """The router on a loopback port."""
    with werkzeug_server(app) as base:
        yield base


def call(method: str, url: str, token: str = OPERATOR, **kwargs: Any) -> requests.Response:
    """One HTTP call to the router."""
    headers = {**auth(token), **kwargs.pop("headers", {})}
    with requests.request(method, url, headers=headers, timeout=10, **kwargs) as answer:
        return answer


def put_role(url: str, binding: dict[str, Any]) -> None:
    """Create role `r` with `binding`."""
    answer = call("PUT", f"{url}/v1/bindings/r", json=binding)
    assert answer.status_code == 201, answer.text


def state(url: str) -> tuple[int, float, int]:
    """(version, share, history length) of role `r`."""
    record = call("GET", f"{url}/v1/bindings/r", CALLER).json()
    entries = call("GET", f"{url}/v1/bindings/r/history", CALLER).json()["entries"]
    return record["version"], record["binding"]["share"], len(entries)


def test_the_gatekeepers_promote_past_an_unapproved_step_is_refused(url: str) -> None:
    """Gatekeeper token, unapproved approval step: 409 naming the approval, nothing written."""
    put_role(url, WAITING)
    before = state(url)
    api = ApiClient(url, GATEKEEPER)
    try:
        with pytest.raises(ApiError) as refused:
            # Exactly what the gatekeeper loop sends when it decides to advance.
            api.post("/v1/bindings/r/promote", {"reason": "gatekeeper: gate passed"},
                     version=before[0])
        assert refused.value.status == 409
        assert "approval" in refused.value.message
    finally:
        api.close()
    assert state(url) == before
    # An operator's token meets the same rule, and so does the CLI.
    answer = call("POST", f"{url}/v1/bindings/r/promote", json={"reason": "by hand"})
    assert answer.status_code == 409 and "approv" in answer.json()["error"]["message"]
    result = CliRunner().invoke(main, ["promote", "r", "--reason", "by hand", "--url", url,
                                       "--token", OPERATOR],
                                env={"ROLEGATE_RETRY_NO_WAIT": "1"})
    assert result.exit_code != 0 and "approv" in result.output
    # Skipping the step with a direct share or a replace is the same move forward.
    answer = call("POST", f"{url}/v1/bindings/r/canary", json={"reason": "x", "share": 0.5})
    assert answer.status_code == 409, answer.text
    answer = call("PUT", f"{url}/v1/bindings/r", json={**WAITING, "share": 0.5},
                  headers={"If-Match": str(before[0])})
    assert answer.status_code == 409, answer.text
    assert state(url) == before
    # Once approved, the gatekeeper's promote lands.
    assert call("POST", f"{url}/v1/bindings/r/approve",
                json={"reason": "numbers reviewed"}).status_code == 200
    answer = call("POST", f"{url}/v1/bindings/r/promote", GATEKEEPER, json={"reason": "gate"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["binding"]["share"] == 0.5


def test_nobody_moves_a_paused_role_forward_until_it_is_resumed(url: str) -> None:
    """Paused: promote (gatekeeper, operator), canary up and replace up answer 409; rollback works."""
    put_role(url, RUNNING)
    assert call("POST", f"{url}/v1/bindings/r/pause", json={"reason": "look"}).status_code == 200
    before = state(url)
    for token in (GATEKEEPER, OPERATOR):
        answer = call("POST", f"{url}/v1/bindings/r/promote", token, json={"reason": "go"})
        assert answer.status_code == 409, answer.text
        assert "paused" in answer.json()["error"]["message"]
    answer = call("POST", f"{url}/v1/bindings/r/canary", json={"reason": "x", "share": 0.5})
    assert answer.status_code == 409, answer.text
    answer = call("PUT", f"{url}/v1/bindings/r", json={**RUNNING, "paused": True, "share": 0.5},
                  headers={"If-Match": str(before[0])})
    assert answer.status_code == 409, answer.text
    assert state(url) == before
    assert call("POST", f"{url}/v1/bindings/r/resume", json={"reason": "ok"}).status_code == 200
    answer = call("POST", f"{url}/v1/bindings/r/promote", GATEKEEPER, json={"reason": "go"})
    assert answer.status_code == 200 and answer.json()["binding"]["share"] == 0.5


def test_a_paused_role_still_rolls_back_and_steps_down() -> None:
    """The holds stop exposure growing: rollback and a lower share are never held."""
    paused = Binding(current="a", candidate="b", stage=Stage.CANARY, share=0.5,
                     steps=(0.1, 0.5), paused=True)
    assert apply(paused, Event.ROLLBACK, 1.0).binding.stage is Stage.ROLLED_BACK
    assert apply(paused, Event.SET_SHARE, 1.0, share=0.1).binding.share == 0.1
    with pytest.raises(IllegalTransition, match="paused"):
        apply(paused, Event.ADVANCE, 1.0)
    waiting = Binding(current="a", candidate="b", stage=Stage.FULL, share=1.0,
                      steps=(0.1, CanaryStep(share=1.0, approval=True)))
    with pytest.raises(IllegalTransition, match="approval"):
        apply(waiting, Event.ADVANCE, 1.0)
    # Where it goes once freed is still told (the gate page's "awaits approval to ...").
    assert destination(waiting, 1.0) is not None
