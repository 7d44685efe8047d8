"""Client(mask=...): what a trace carries is masked before it is queued, end to end.

A real Client reports to the real router; the test reads the run back from the
router's trace store and from the judge's claim route (what an online judge is
sent), and finds only the masked values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask import Flask

from rolegate import Client
from rolegate.masking import FAILED, mask_trace
from rolegate.trace import Trace
from router.api.traces import trace_store
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, auth
from tests.servers import werkzeug_server

ROLE = "support"
STAMPS = {"agent_version": "1", "instruction_hash": "i", "model_id": "m", "tool_schema_hash": "t"}
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
SECRET = "ann.lee@example.com"


def redact(value: Any) -> Any:
    """Every e-mail address in the value (any JSON shape) replaced by <email>."""
    return json.loads(EMAIL.sub("<email>", json.dumps(value)))


def broken(value: Any) -> Any:
    """A mask that fails (on a value holding the secret, quoting it as exceptions do)."""
    raise ValueError(f"cannot parse {value!r}")


@pytest.fixture
def url(app: Flask) -> Iterator[str]:
    """The router on loopback, with a role whose judge samples every run (never asked here)."""
    spec = {"instructions": [{"id": "tone", "text": "Be polite.", "trajectory": True}]}
    with werkzeug_server(app) as base:
        r = requests.put(f"{base}/v1/configs/cfg_a", json={"spec": spec}, headers=auth(OPERATOR),
                         timeout=5)
        assert r.status_code == 201, r.text
        judge = {"url": "http://127.0.0.1:9/v1/chat/completions", "model": "j",
                 "sample_rate": 1.0}
        r = requests.put(f"{base}/v1/bindings/{ROLE}", headers=auth(OPERATOR), timeout=5,
                         json={"current": "cfg_a", "gate": {"judge": judge}})
        assert r.status_code == 201, r.text
        yield base


def report_one(url: str, mask: Any) -> str:
    """One run carrying the secret in its input, output, tool arguments and result."""
    client = Client(url, CALLER, mask=mask)
    try:
        with client.recorder(client.resolve(ROLE, "job-1"), STAMPS,
                             input={"from": SECRET, "ask": "refund"}) as run:
            run.tool("lookup_customer", {"email": SECRET}, result={"name": "Ann", "email": SECRET})
            run.output(f"Refunded; confirmation sent to {SECRET}.")
        assert client.flush(10)
        return run.run_id
    finally:
        client.close()


def claimed(url: str) -> dict[str, Any]:
    """What the online judge would be sent for the role's one sampled run."""
    r = requests.post(f"{url}/v1/roles/{ROLE}/judge/claim", json={"max": 4},
                      headers=auth(GATEKEEPER), timeout=5)
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert len(items) == 1
    return dict(items[0])


def test_the_router_and_the_judge_hold_only_the_masked_values(app: Flask, url: str) -> None:
    """Input, output, tool args and result are stored masked; the judge's claim is masked."""
    run_id = report_one(url, redact)
    stored = trace_store(app).lookup(ROLE, run_id).trace
    assert stored.input == {"from": "<email>", "ask": "refund"}
    assert stored.output_text == "Refunded; confirmation sent to <email>."
    assert stored.steps is not None
    assert stored.steps[0].args == {"email": "<email>"}
    assert stored.steps[0].result == {"name": "Ann", "email": "<email>"}
    work = claimed(url)
    assert "<email>" in work["input_text"] and "<email>" in work["trajectory_text"]
    assert SECRET not in json.dumps(work)


def test_a_raising_mask_fails_closed(app: Flask, url: str) -> None:
    """The mask raises: each field is sent as "<masking failed>", never the raw value."""
    run_id = report_one(url, broken)
    stored = trace_store(app).lookup(ROLE, run_id).trace
    assert stored.input == {"masked": FAILED}
    assert stored.output_text == FAILED
    assert stored.steps is not None
    assert stored.steps[0].args == {"masked": FAILED} and stored.steps[0].result == FAILED
    assert stored.steps[0].tool == "lookup_customer"  # the rest of the run is as it was
    assert SECRET not in json.dumps(claimed(url))


def test_a_mask_returning_what_no_trace_holds_sends_failed() -> None:
    """A mask that returns NaN (not JSON): every masked field becomes "<masking failed>"."""
    trace = Trace.model_validate({
        "run_id": "r", "role": ROLE, "config": "cfg_a", "arm": "current", "stamps": STAMPS,
        "input": {"from": SECRET}, "output_text": SECRET,
        "steps": [{"tool": "t", "args": {"a": SECRET}, "result": SECRET}]})
    masked = mask_trace(trace, lambda value: float("nan"))
    assert masked.input == {"masked": FAILED} and masked.output_text == FAILED
    assert masked.steps is not None and masked.steps[0].result == FAILED
    assert SECRET not in masked.model_dump_json()
