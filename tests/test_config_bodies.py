"""Config bodies: registered with PUT /v1/configs, carried by the snapshot, served on resolve."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from gatekeeper.store.traces import TraceStore
from gatekeeper.suite.runner import RunOptions, SuiteRunner
from gatekeeper.suite.scenario import SuiteError, load_config, load_suite
from rolegate import Client
from rolegate.body import parse_body, stamps_of
from tests.conftest import CALLER, OPERATOR, auth
from tests.live import (
    LiveRouter,
    put_role,
    router,  # noqa: F401  (the pytest fixture the tests below take)
    wait_for,
)

AGENT_BODY: dict[str, Any] = {
    "model": {"name": "gpt-test", "parameters": {"temperature": 0.2}},
    "instructions": "Summarize the document; keep every table.",
    "tools": [{"name": "search", "description": "Search the corpus.",
               "parameters": {"type": "object", "required": ["q"],
                              "properties": {"q": {"type": "string"}}}},
              {"name": "fetch", "parameters": {"type": "object"}}],
}
COMPLETION_BODY: dict[str, Any] = {
    "mode": "completion", "model": {"name": "small-1"},
    "messages": [{"role": "system", "content": "You label tickets."},
                 {"role": "user", "content": "{ticket}"}],
}


def put_config(client: FlaskClient, config: str, **body: Any) -> Any:
    """PUT /v1/configs/<config> as an operator."""
    return client.put(f"/v1/configs/{config}", json=body, headers=auth(OPERATOR))


def test_a_config_registers_an_agent_or_completion_body(client: FlaskClient) -> None:
    """A body without a spec is accepted; agent mode is the default; GET returns it."""
    answer = put_config(client, "sum-v1", body=AGENT_BODY)
    assert answer.status_code == 201, answer.json
    stored = client.get("/v1/configs/sum-v1", headers=auth(CALLER)).json
    assert stored["body"]["mode"] == "agent"
    assert stored["body"]["tools"][0]["parameters"]["required"] == ["q"]
    assert put_config(client, "label-v1", body=COMPLETION_BODY).status_code == 201
    assert client.get("/v1/configs/label-v1", headers=auth(CALLER)).json["body"][
        "messages"][0]["role"] == "system"
    spec_only = put_config(client, "spec-only", spec={"system": "x"})
    assert spec_only.status_code == 201 and "body" not in spec_only.json


@pytest.mark.parametrize("body, field", [
    ({"tools": [], "instructions": "no model"}, "model"),
    ({**AGENT_BODY, "tools": [AGENT_BODY["tools"][0], AGENT_BODY["tools"][0]]}, "tools"),
    ({**AGENT_BODY, "tools": [{"name": "x", "parameters": {"type": "thing"}}]}, "parameters"),
    ({"mode": "completion", "model": {"name": "m"}, "messages": []}, "messages"),
    ({"mode": "chat", "model": {"name": "m"}}, "mode"),
    ({**AGENT_BODY, "instructions": "x" * (300 * 1024)}, "body"),
])
def test_a_bad_body_is_a_422_naming_the_field(client: FlaskClient, body: dict[str, Any],
                                              field: str) -> None:
    """No model, a tool twice, a bad schema type, no messages, an unknown mode, too big: 422."""
    answer = put_config(client, "bad", body=body)
    assert answer.status_code == 422, answer.json
    assert field in json.dumps(answer.json["error"])
    assert client.get("/v1/configs/bad", headers=auth(CALLER)).status_code == 404


def test_a_config_needs_a_spec_or_a_body(client: FlaskClient) -> None:
    """An empty PUT is refused with a message saying what is missing."""
    answer = put_config(client, "empty")
    assert answer.status_code == 422 and "spec, a body" in answer.json["error"]["message"]


def test_the_snapshot_carries_bodies_and_resolve_includes_them(client: FlaskClient) -> None:
    """GET /v1/bindings lists current and candidate bodies; ?include=body adds the body."""
    put_config(client, "sum-v1", body=AGENT_BODY)
    put_config(client, "sum-v2", body={**AGENT_BODY, "instructions": "Shorter."})
    client.put("/v1/bindings/summarizer", json={"current": "sum-v1", "candidate": "sum-v2",
                                                "stage": "shadow"}, headers=auth(OPERATOR))
    snapshot = client.get("/v1/bindings", headers=auth(CALLER)).json
    assert sorted(snapshot["bodies"]) == ["sum-v1", "sum-v2"]
    plain = client.get("/v1/resolve/summarizer?key=k1", headers=auth(CALLER)).json
    assert "body" not in plain
    full = client.get("/v1/resolve/summarizer?key=k1&include=body", headers=auth(CALLER)).json
    assert full["body"]["instructions"] == AGENT_BODY["instructions"]
    assert full["shadow_body"]["instructions"] == "Shorter."
    bad = client.get("/v1/resolve/summarizer?include=everything", headers=auth(CALLER))
    assert bad.status_code == 400 and bad.json["error"]["details"]["field"] == "include"


def test_a_body_change_is_a_new_generation(client: FlaskClient) -> None:
    """Replacing a body bumps the snapshot's generation (ETag); an unchanged one does not."""
    put_config(client, "sum-v1", body=AGENT_BODY)
    client.put("/v1/bindings/summarizer", json={"current": "sum-v1"}, headers=auth(OPERATOR))
    before = client.get("/v1/bindings", headers=auth(CALLER)).json["generation"]
    put_config(client, "sum-v1", body=AGENT_BODY, description="same body")
    same = client.get("/v1/bindings", headers=auth(CALLER)).json["generation"]
    put_config(client, "sum-v1", body={**AGENT_BODY, "instructions": "New wording."})
    after = client.get("/v1/bindings", headers=auth(CALLER)).json
    assert same == before and after["generation"] == before + 1
    assert after["bodies"]["sum-v1"]["instructions"] == "New wording."


def test_client_resolve_returns_the_body_with_no_extra_call(router: LiveRouter) -> None:
    """The client's resolution carries its config's body, and follows a body change."""
    router.api("PUT", "/v1/configs/sum-v1", json={"body": AGENT_BODY})
    router.api("PUT", "/v1/configs/sum-v2", json={"body": COMPLETION_BODY})
    put_role(router, "summarizer", current="sum-v1", candidate="sum-v2", stage="canary",
             share=0.5)
    put_role(router, "plain", current="no-body")
    with Client(router.url, CALLER, refresh_interval=0.05) as client:
        seen = {client.resolve("summarizer", f"job-{n}")["config"]: client.resolve(
            "summarizer", f"job-{n}") for n in range(40)}
        assert seen["sum-v1"]["body"]["model"]["name"] == "gpt-test"
        assert seen["sum-v2"]["body"]["mode"] == "completion"
        assert "body" not in client.resolve("plain", "k")
        router.api("PUT", "/v1/configs/sum-v1",
                   json={"body": {**AGENT_BODY, "instructions": "Changed."}})
        wait_for(lambda: any(
            client.resolve("summarizer", f"job-{n}").get("body", {}).get("instructions")
            == "Changed." for n in range(40)))


def test_stamps_come_from_the_body() -> None:
    """Instruction and tool-schema hashes change with what they hash, and only with it."""
    base = stamps_of(AGENT_BODY, "agent-1")
    reordered = stamps_of({**AGENT_BODY, "tools": AGENT_BODY["tools"][::-1]}, "agent-1")
    reworded = stamps_of({**AGENT_BODY, "instructions": "Other."}, "agent-1")
    schema = json.loads(json.dumps(AGENT_BODY))
    schema["tools"][0]["parameters"]["properties"]["q"]["type"] = "integer"
    retyped = stamps_of(schema, "agent-1")
    assert base["model_id"] == "gpt-test" and base == reordered
    assert reworded["instruction_hash"] != base["instruction_hash"]
    assert reworded["tool_schema_hash"] == base["tool_schema_hash"]
    assert retyped["tool_schema_hash"] != base["tool_schema_hash"]
    assert retyped["instruction_hash"] == base["instruction_hash"]
    completion = stamps_of(parse_body(COMPLETION_BODY), "agent-1")
    assert completion["model_id"] == "small-1"


def test_the_offline_suite_hands_the_body_to_the_agent(tmp_path: Path) -> None:
    """A suite run's agent gets the config's body on stdin; the stamps are the body's."""
    root = tmp_path / "suite"
    (root / "scenarios").mkdir(parents=True)
    (root / "scenarios" / "one.json").write_text(json.dumps(
        {"id": "one", "task": "Echo the model.", "repeats": 1}))
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import json, sys\n"
        "request = json.load(sys.stdin)\n"
        "body = request['body']\n"
        "print(json.dumps({'output_text': body['model']['name'] + ' ' + body['instructions'],"
        " 'answered': True}))\n")
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"name": "cfg_body", "agent_version": "a-1",
                                  "body": AGENT_BODY}))
    run = SuiteRunner(load_suite(root), load_config(config), f"{sys.executable} {agent}",
                      RunOptions(repeats=1, parallel=1), progress=None).run()
    trace = run.records[0].trace
    assert trace is not None, run.records[0].error
    assert trace.output_text == "gpt-test " + AGENT_BODY["instructions"]
    assert trace.stamps.model_dump() == stamps_of(AGENT_BODY, "a-1")


def test_a_suite_config_with_a_bad_body_is_refused_naming_the_field(tmp_path: Path) -> None:
    """load_config refuses a body without a model, naming the field."""
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"name": "bad_body", "body": {"instructions": "x"}}))
    with pytest.raises(SuiteError, match=r"body\.(agent\.)?model: Field required"):
        load_config(config)


def test_the_documented_body_is_accepted(client: FlaskClient) -> None:
    """The body shown in docs/client.md registers as written."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "client.md").read_text()
    shown = json.loads(text.split("## Config bodies", 1)[1].split("```json\n", 1)[1]
                       .split("```", 1)[0])
    answer = put_config(client, "documented", **shown)
    assert answer.status_code == 201, answer.json
    assert answer.json["body"]["tools"][0]["name"] == "search"


def test_a_recorded_run_is_stamped_from_its_configs_body(router: LiveRouter,
                                                         redis_conn: redis.Redis) -> None:
    """Without explicit stamps, a run of a config with a body gets the body's stamps."""
    router.api("PUT", "/v1/configs/sum-v1", json={"body": AGENT_BODY})
    router.api("PUT", "/v1/configs/sum-v2", json={"body": COMPLETION_BODY})
    put_role(router, "summarizer", current="sum-v1", candidate="sum-v2", stage="shadow")
    put_role(router, "plain", current="no-body")
    with Client(router.url, CALLER, agent_version="agent-7") as client:
        resolution = client.resolve("summarizer", "job-1")
        with client.recorder(resolution) as run:
            run.output("done")
        with client.recorder(resolution, shadow=True) as shadow:
            shadow.output("done")
        with pytest.raises(ValueError, match="agent_version"):
            client.recorder(client.resolve("plain"))
        assert client.flush(10)
    store = TraceStore(redis_conn)
    assert store.lookup("summarizer", run.run_id).trace.stamps.model_dump() == stamps_of(
        AGENT_BODY, "agent-7")
    assert store.lookup("summarizer", shadow.run_id).trace.stamps.model_dump() == stamps_of(
        COMPLETION_BODY, "agent-7")
