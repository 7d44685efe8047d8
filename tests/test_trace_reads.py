"""Reading stored traces back (GET /v1/traces/<run_id>, GET /v1/roles/<role>/traces) and
`rolegate traces post|show|tail`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from flask.testing import FlaskClient

from router import create_app
from router.cli import main
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.live import (
    LiveRouter,
    put_role,
    router,  # noqa: F401  (the pytest fixture the tests below take)
)

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


def a_trace(run_id: str, role: str = "r", config: str = "a", arm: str = "current",
            **fields: Any) -> dict[str, Any]:
    """A valid trace with `fields` on top."""
    return {"run_id": run_id, "role": role, "config": config, "arm": arm, "key": run_id,
            "stamps": STAMPS, "output_text": "ok", **fields}


def post(client: FlaskClient, *traces: dict[str, Any]) -> Any:
    """POST traces and return the answer's JSON."""
    answer = client.post("/v1/traces", json={"traces": list(traces)}, headers=auth(CALLER))
    assert answer.status_code in (200, 207), answer.json
    return answer.json


def stream_order(ident: str) -> tuple[int, int]:
    """A stream id as (milliseconds, sequence), the order Redis gives it."""
    ms, _, seq = ident.partition("-")
    return int(ms), int(seq)


def make_role(client: FlaskClient, role: str = "r", **binding: Any) -> None:
    """Create `role` on config a (plus `binding`)."""
    answer = client.put(f"/v1/bindings/{role}", json={"current": "a", **binding},
                        headers=auth(OPERATOR))
    assert answer.status_code == 201, answer.json


def test_a_stored_trace_reads_back_with_its_new_fields(client: FlaskClient) -> None:
    """GET /v1/traces/<run_id> answers the trace as reported, its verdict and arrival."""
    make_role(client)
    trace = a_trace("run-1", tokens_in=10, tokens_out=5,
                    error={"type": "TimeoutError", "message": "model timed out"},
                    steps=[{"tool": "search", "agent": "triage", "parallel_group": "g1",
                            "latency_s": 0.5, "model": "m-large"},
                           {"tool": "fetch", "agent": "triage", "parallel_group": "g1",
                            "error": "404"}])
    post(client, trace)
    answer = client.get("/v1/traces/run-1", headers=auth(CALLER))
    assert answer.status_code == 200, answer.json
    body = answer.json
    assert body["role"] == "r" and body["verdict"]["passed"] is True
    stored = body["trace"]
    assert stored["error"] == {"type": "TimeoutError", "message": "model timed out"}
    assert (stored["tokens"], stored["tokens_in"], stored["tokens_out"]) == (15, 10, 5)
    assert stored["steps"][0]["agent"] == "triage" and stored["steps"][1]["error"] == "404"
    assert stored["tool_errors"] == 1 and body["received"] > 0


def test_an_unknown_or_ambiguous_run_id_is_a_clear_4xx(client: FlaskClient) -> None:
    """Unknown run id: 404; one known to two roles: 409 until ?role= names one."""
    make_role(client, "r")
    make_role(client, "s")
    post(client, a_trace("twice", role="r"), a_trace("twice", role="s"))
    assert client.get("/v1/traces/nope", headers=auth(CALLER)).status_code == 404
    assert client.get("/v1/traces/twice", headers=auth(CALLER)).status_code == 409
    named = client.get("/v1/traces/twice?role=s", headers=auth(CALLER))
    assert named.status_code == 200 and named.json["role"] == "s"
    assert client.get("/v1/traces/twice?role=bad%20role", headers=auth(CALLER)).status_code == 400
    assert client.get("/v1/traces/twice").status_code == 401


def test_the_tripwires_run_can_be_fetched(client: FlaskClient) -> None:
    """The run a tripwire rollback names in history reads back over HTTP."""
    make_role(client, candidate="b", stage="canary", share=0.5,
              gate={"invariants": {"forbidden_tools": ["delete_account"]}})
    answer = post(client, a_trace("bad-run", config="b", arm="candidate",
                                  tools=["delete_account"]))
    assert answer["tripwire"][0]["run_id"] == "bad-run"
    history = client.get("/v1/bindings/r/history?limit=1", headers=auth(CALLER)).json
    named = history["entries"][0]
    assert "bad-run" in json.dumps(named)
    fetched = client.get("/v1/traces/bad-run", headers=auth(CALLER)).json
    assert fetched["trace"]["tools"] == ["delete_account"]
    assert fetched["verdict"]["passed"] is False


def test_role_traces_merge_arms_in_arrival_order_and_page(client: FlaskClient) -> None:
    """GET /v1/roles/<role>/traces merges current and candidate, newest `limit`, since_id pages."""
    make_role(client, candidate="b", stage="canary", share=0.5)
    for n in range(6):
        arm, config = ("candidate", "b") if n % 2 else ("current", "a")
        post(client, a_trace(f"t{n}", config=config, arm=arm))
    newest = client.get("/v1/roles/r/traces?limit=4", headers=auth(CALLER)).json
    assert [e["trace"]["run_id"] for e in newest["traces"]] == ["t2", "t3", "t4", "t5"]
    first = client.get("/v1/roles/r/traces?limit=1000", headers=auth(CALLER)).json
    assert [e["trace"]["run_id"] for e in first["traces"]] == [f"t{n}" for n in range(6)]
    middle = first["traces"][2]["id"]
    paged = client.get(f"/v1/roles/r/traces?since_id={middle}", headers=auth(CALLER)).json
    # Inclusive: every trace from that stream id on, with any stored in the same
    # millisecond of another stream (stream ids only order one stream).
    expected = [e["trace"]["run_id"] for e in first["traces"]
                if stream_order(e["id"]) >= stream_order(middle)]
    assert "t2" in expected
    assert [e["trace"]["run_id"] for e in paged["traces"]] == expected
    only = client.get("/v1/roles/r/traces?arm=candidate", headers=auth(CALLER)).json
    assert [e["trace"]["run_id"] for e in only["traces"]] == ["t1", "t3", "t5"]
    for query in ("since_id=yesterday", "limit=0", "limit=5000", "arm=left"):
        assert client.get(f"/v1/roles/r/traces?{query}",
                          headers=auth(CALLER)).status_code == 400, query
    assert client.get("/v1/roles/ghost/traces", headers=auth(CALLER)).status_code == 404


def cli(router: LiveRouter, *args: str, stdin: str | None = None) -> Any:
    """Run `rolegate ARGS` against the live router."""
    return CliRunner().invoke(main, list(args), input=stdin,
                              env={"ROLEGATE_URL": router.url, "ROLEGATE_TOKEN": CALLER})


def test_cli_posts_a_file_and_stdin_and_reports_refusals(router: LiveRouter,
                                                         tmp_path: Path) -> None:
    """`rolegate traces post` sends a file or stdin; a refused trace prints why and exits 1."""
    put_role(router, "r", current="a")
    batch = tmp_path / "traces.json"
    batch.write_text(json.dumps({"traces": [a_trace("c1"), a_trace("c2")]}))
    done = cli(router, "traces", "post", str(batch))
    assert done.exit_code == 0, done.output
    assert "2 traces: 2 accepted, 0 duplicates, 0 refused" in done.output
    again = cli(router, "traces", "post", "-", stdin=json.dumps([a_trace("c1"),
                                                                  a_trace("c3", role="ghost")]))
    assert again.exit_code == 1
    assert "1 duplicates, 1 refused" in again.output and "refused #1 c3" in again.output
    bad = cli(router, "traces", "post", "-", stdin="{not json")
    assert bad.exit_code == 2


def test_cli_show_and_tail(router: LiveRouter) -> None:
    """`traces show RUN_ID` prints the stored trace; `traces tail ROLE --once` the newest lines."""
    put_role(router, "r", current="a")
    router.api("POST", "/v1/traces", token=CALLER, json={"traces": [
        a_trace("s1", tools=["search"]), a_trace("s2", tools=["search", "fetch"])]})
    shown = cli(router, "traces", "show", "s2")
    assert shown.exit_code == 0 and json.loads(shown.output)["trace"]["tools"] == [
        "search", "fetch"]
    tail = cli(router, "traces", "tail", "r", "--once", "-n", "5")
    assert tail.exit_code == 0, tail.output
    lines = tail.output.strip().splitlines()
    assert [line.split()[1] for line in lines] == ["s1", "s2"]
    assert "current/a pass" in lines[1] and "tools=search fetch" in lines[1]
    missing = cli(router, "traces", "show", "nope")
    assert missing.exit_code == 1


@pytest.mark.parametrize("raw", ["[]", '{"traces": []}'])
def test_cli_post_of_nothing_is_refused(router: LiveRouter, raw: str) -> None:
    """An empty file is a usage error, not a silent success."""
    done = cli(router, "traces", "post", "-", stdin=raw)
    assert done.exit_code == 2 and "no traces" in done.output


def test_the_readmes_trace_is_accepted_and_reads_back(client: FlaskClient) -> None:
    """The complete trace shown in the README validates, is stored, and reads back as shown."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("One complete trace", 1)[1]
    shown = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    example = json.loads((Path(__file__).resolve().parent.parent
                          / "bindings.example.json").read_text())
    binding = example["roles"][shown["role"]]
    make = client.put(f"/v1/bindings/{shown['role']}", json=binding, headers=auth(OPERATOR))
    assert make.status_code == 201, make.json
    assert post(client, shown)["accepted"] == 1
    stored = client.get(f"/v1/traces/{shown['run_id']}", headers=auth(CALLER)).json["trace"]
    assert {k: stored[k] for k in shown} == shown
    assert (stored["tools"], stored["tool_errors"], stored["tokens"]) == (
        ["read_file", "search", "fetch"], 1, 2710)


def test_cli_post_halves_a_batch_the_router_finds_too_large(redis_url: str,
                                                           tmp_path: Path) -> None:
    """Under a 200 KB body limit, ten 50 KB traces in one file are all accepted."""
    app = create_app({"redis_url": redis_url, "tokens": TOKENS, "testing": True,
                      "refresh_interval_s": 0.05, "max_body_bytes": 200 * 1024})
    live = LiveRouter(app)
    live.start()
    try:
        put_role(live, "r", current="a")
        batch = tmp_path / "big.json"
        batch.write_text(json.dumps([a_trace(f"big-{n}", output_text="x" * 50_000)
                                     for n in range(10)]))
        done = cli(live, "traces", "post", str(batch))
    finally:
        live.stop()
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
    assert done.exit_code == 0, done.output
    assert "10 traces: 10 accepted" in done.output
