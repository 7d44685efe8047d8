"""The compact ingest answer (issue 38): `Prefer: return=minimal` gets counts and what went wrong.

A batch's answer otherwise carries one result per trace (~340 bytes each); asked for
minimal it carries the counts, every refusal and each trace that tripped the wire,
and says `Preference-Applied: return=minimal`. Without the header the answer is
the per-trace one, unchanged. The SDK's reporter asks for it and still counts every
refusal by its reason.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from rolegate.http import COMPACT
from router.api.trace_answers import wants_minimal
from tests.conftest import CALLER, auth
from tests.test_api_traces import make_role, trace

MINIMAL = {**auth(CALLER), "Prefer": "return=minimal"}


def _batch() -> list[dict[str, Any]]:
    """Five passing traces, one refused (a config the role does not run), one tripping."""
    batch = [trace(f"ok-{i}") for i in range(5)]
    batch.append(trace("unbound", config="cfg_z"))
    batch.append(trace("bad-run", arm="candidate", tools=["read", "web_write"]))
    return batch


def test_minimal_keeps_the_counts_refusals_and_trips(client: FlaskClient) -> None:
    """7 traces: 6 stored, 1 refused, 1 tripped; results name only the refused and the tripped."""
    make_role(client, share=0.1)
    r = client.post("/v1/traces", json={"traces": _batch()}, headers=MINIMAL)
    assert r.status_code == 207, r.json
    assert r.headers["Preference-Applied"] == "return=minimal"
    body = r.json
    assert (body["accepted"], body["duplicates"], body["refused"]) == (6, 0, 1)
    assert [(x["index"], x["run_id"], x["status"]) for x in body["results"]] == [
        (5, "unbound", "refused"), (6, "bad-run", "accepted")]
    assert body["results"][0]["error"]["code"] == "config_not_bound"
    assert body["results"][1]["verdict"]["blocking"] is True
    assert [t["run_id"] for t in body["tripwire"]] == ["bad-run"]


def test_without_the_header_every_trace_has_its_result(client: FlaskClient) -> None:
    """The same batch unasked: one result per trace, in order, and no Preference-Applied."""
    make_role(client, share=0.1)
    r = client.post("/v1/traces", json={"traces": _batch()}, headers=auth(CALLER))
    assert r.status_code == 207 and "Preference-Applied" not in r.headers
    assert [x["index"] for x in r.json["results"]] == list(range(7))


def test_a_clean_batch_answers_counts_only(client: FlaskClient) -> None:
    """100 stored traces asked minimal: no results at all, and a retry counts duplicates."""
    make_role(client)
    batch = {"traces": [trace(f"r{i}") for i in range(100)]}
    first = client.post("/v1/traces", json=batch, headers=MINIMAL)
    assert first.status_code == 200
    assert first.json == {"accepted": 100, "duplicates": 0, "refused": 0, "results": [],
                          "tripwire": []}
    again = client.post("/v1/traces", json=batch, headers=MINIMAL)
    assert (again.json["accepted"], again.json["duplicates"], again.json["results"]) == (
        0, 100, [])
    full = client.post("/v1/traces", json=batch, headers=auth(CALLER))
    assert len(full.get_data()) > 50 * len(again.get_data())


def test_a_single_trace_asked_minimal_is_compact_too(client: FlaskClient) -> None:
    """A plain single-trace POST with the header takes the view's compact answer."""
    make_role(client)
    r = client.post("/v1/traces", json=trace("one"), headers=MINIMAL)
    assert r.status_code == 200 and r.json["results"] == [] and r.json["accepted"] == 1
    assert r.headers["Preference-Applied"] == "return=minimal"


def test_all_refused_lists_every_refusal_either_way(client: FlaskClient) -> None:
    """422: every trace refused, each with its reason, asked minimal or not."""
    make_role(client)
    batch = {"traces": [trace(f"z{i}", config="cfg_z") for i in range(3)]}
    for headers in (MINIMAL, auth(CALLER)):
        r = client.post("/v1/traces", data=json.dumps(batch),
                        headers={**headers, "Content-Type": "application/json"})
        assert r.status_code == 422
        assert [x["index"] for x in r.json["results"]] == [0, 1, 2]


@pytest.mark.parametrize(("prefer", "minimal"), [
    ("return=minimal", True), ("respond-async, return=minimal", True),
    ("RETURN=MINIMAL; foo=bar", True), ("return=representation", False), ("", False),
    (None, False), ("return=minimalist", False)])
def test_the_prefer_header_is_read_as_rfc_7240_says(prefer: str | None, minimal: bool) -> None:
    """Any of several comma-separated preferences; parameters after ';' ignored."""
    assert wants_minimal(prefer) is minimal


def test_the_sdk_asks_for_the_compact_answer() -> None:
    """The reporter's header is the one the router reads."""
    assert wants_minimal(COMPACT["Prefer"])
