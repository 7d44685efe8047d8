"""Fields a run declares reach the trace from every producer, a new one with no producer change.

The SDK's recorder (`run.mark(...)`, which the integrations record through), OTLP spans
(`rolegate.trace.<field>` on the root span or resource, through the router's real OTLP
ingest) and the plain JSON body all set the same Trace fields; the recorder refuses a
field it measures itself or one Trace does not have, naming it. A field added to Trace
(here by a subclass standing in for the edit) is declarable through the recorder and
through span assembly without touching either.
"""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

import rolegate.recorder
import rolegate.trace
from rolegate.recorder import Recorder
from rolegate.spans import Span, assemble
from rolegate.trace import Trace
from router.api.traces import trace_store
from tests.test_otlp_ingest import PLACED, TRACE_ID, export, make_role, post, root

STAMPS = {"agent_version": "1", "instruction_hash": "i", "model_id": "m", "tool_schema_hash": "t"}
RESOLUTION = {"role": "support", "config": "cfg_b", "arm": "candidate", "key": "job-9"}


def test_the_recorder_sets_a_declared_field_and_refuses_the_rest() -> None:
    """mark(scenario=...) lands in the trace; a measured or unknown field is a ValueError
    naming it, raised when marked, not when the run ends."""
    run = Recorder(RESOLUTION, STAMPS)
    run.mark(scenario="refund-7")
    run.output("done")
    assert run.finish().scenario == "refund-7"
    with pytest.raises(ValueError, match=r"cost_usd \(measured, not declared\)"):
        Recorder(RESOLUTION, STAMPS).mark(cost_usd=1.0)
    with pytest.raises(ValueError, match=r"priority \(not a Trace field\)"):
        Recorder(RESOLUTION, STAMPS).mark(priority=True)


def test_otlp_spans_declare_fields_through_the_router(app: Flask, client: FlaskClient) -> None:
    """`rolegate.trace.scenario` on the root span is the stored run's scenario; a measured
    field named the same way (`rolegate.trace.cost_usd`) is ignored, not trusted."""
    make_role(client)
    body = export(root(**PLACED, **{"rolegate.trace.scenario": "refund-7",
                                    "rolegate.trace.cost_usd": "99"}))
    answer = post(client, body)
    assert answer.status_code == 200, answer.json
    stored = trace_store(app).lookup("support", TRACE_ID).trace
    assert stored.scenario == "refund-7" and stored.cost_usd == 0.0


def test_a_field_added_to_trace_reaches_the_recorder_and_the_spans_unchanged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Trace with `escalated: bool` (the maintainer's change): the recorder and span assembly
    carry it as they are; only the model changed."""
    class Escalated(Trace):
        escalated: bool = False

    monkeypatch.setattr(rolegate.trace, "Trace", Escalated)
    monkeypatch.setattr(rolegate.recorder, "Trace", Escalated)
    run = Recorder(RESOLUTION, STAMPS)
    run.mark(escalated=True)
    run.output("handed to a human")
    trace: Any = run.finish()
    assert trace.escalated is True
    span = Span(TRACE_ID, "1".rjust(16, "0"), None, "invoke_agent triage", 0, 50_000_000,
                {**PLACED, "gen_ai.operation.name": "invoke_agent",
                 "rolegate.trace.escalated": True})
    assembled: Any = Escalated.model_validate(assemble([span]))
    assert assembled.escalated is True
