"""One config-id rule for bindings, the config registry, traces, offline verdicts and URLs."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from flask.testing import FlaskClient
from pydantic import ValidationError

from bindings.errors import InvalidInput
from bindings.models import Binding
from bindings.offline import OfflineVerdict
from bindings.store import binding_key
from gatekeeper.store.configs import ConfigStore, validate_config_id
from rolegate.config_ids import CONFIG_ID_PATTERN, config_id_problem
from rolegate.trace import Trace
from tests.conftest import CALLER, OPERATOR, auth

ROOT = Path(__file__).resolve().parent.parent
STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


def _shipped_ids() -> list[str]:
    """Every config id the shipped example file and the examples/ configs use."""
    roles = json.loads((ROOT / "bindings.example.json").read_text())["roles"]
    ids = [config for b in roles.values() for config in (b["current"], b.get("candidate"))
           if config is not None]
    ids += [json.loads(p.read_text())["name"]
            for p in sorted(ROOT.glob("examples/**/configs/*.json"))]
    return ids


SHIPPED = _shipped_ids()
REFUSED = ["", "a/b", "/x", "a b", " x", "x\n", "tab\there", "nul\x00", "bell\x07", "nel\x85",
           "nbsp\xa0x", ".", "..", "x" * 201]
ACCEPTED = ["a", "...", ".hidden", "v1.2", "gpt-4o:2026-10-02", "summarizer+fast@v2",
            "résumé", "x" * 200, "a{b}c", "q?x#y%z"]


def test_the_shipped_ids_are_the_ones_this_test_reads() -> None:
    """The example file's ids (with an '@') and the examples' config names are all here."""
    assert "summarizer@2026-10-02" in SHIPPED and "refunds_v1" in SHIPPED
    assert len(SHIPPED) == 9


@pytest.mark.parametrize("config", SHIPPED + ACCEPTED)
def test_the_rule_accepts_what_bindings_accept(config: str) -> None:
    """Every shipped id, and ids with '@', ':', '+', dots, braces or non-ASCII letters, pass."""
    assert config_id_problem(config) is None


@pytest.mark.parametrize("config", REFUSED)
def test_the_rule_refuses_ids_no_url_or_log_line_can_carry(config: str) -> None:
    """'/', whitespace, control characters, '.' and '..', and the wrong length are refused."""
    problem = config_id_problem(config)
    assert problem is not None and "config id" in problem


def _binding(config: str) -> object:
    return Binding(current=config)


def _candidate(config: str) -> object:
    return Binding(current="cfg-a", candidate=config, stage="shadow")


def _trace(config: str) -> object:
    return Trace(run_id="r", role="r", config=config, arm="current", stamps=STAMPS)  # type: ignore[arg-type]


def _offline(config: str) -> object:
    return OfflineVerdict(config=config, passed=True)


def _registry(config: str) -> object:
    try:
        return validate_config_id(config)
    except InvalidInput as exc:
        raise ValueError(exc.message) from None


SURFACES: dict[str, Callable[[str], object]] = {
    "binding current": _binding, "binding candidate": _candidate, "trace": _trace,
    "offline verdict": _offline, "config registry": _registry}


@pytest.mark.parametrize("surface", SURFACES)
def test_every_model_uses_the_same_rule(surface: str) -> None:
    """Bindings, traces, offline verdicts and the registry accept and refuse the same ids."""
    make = SURFACES[surface]
    for config in SHIPPED + ACCEPTED:
        make(config)
    for config in REFUSED:
        with pytest.raises((ValidationError, ValueError)) as caught:
            make(config)
        assert "config id" in str(caught.value) or "at most 200" in str(caught.value) \
            or "at least 1" in str(caught.value)


def test_the_openapi_document_states_the_same_rule(client: FlaskClient) -> None:
    """The config path parameters carry the rule's own pattern and length bounds."""
    doc = client.get("/openapi.json").json
    params = [p for item in doc["paths"].values() for op in item.values()
              if isinstance(op, dict) for p in op.get("parameters", ())
              if p["in"] == "path" and p["name"] in ("config", "a", "b")]
    assert params
    for param in params:
        schema = param["schema"]
        assert schema["pattern"] == CONFIG_ID_PATTERN.pattern
        assert (schema["minLength"], schema["maxLength"]) == (1, 200)
    pattern = re.compile(params[0]["schema"]["pattern"])
    assert all(pattern.fullmatch(c) for c in SHIPPED)
    assert not any(pattern.fullmatch(c) for c in ["a/b", "a b", ".", ".."])


def test_find_answers_none_for_an_id_outside_the_rule(redis_conn: redis.Redis) -> None:
    """ConfigStore.find() never raises InvalidInput: such an id was never registered."""
    assert ConfigStore(redis_conn).find("a b") is None
    assert ConfigStore(redis_conn).find("summarizer@2026-10-02") is None
    with pytest.raises(InvalidInput):
        ConfigStore(redis_conn).get("a b")


def _put_config(client: FlaskClient, config: str) -> Any:
    spec = {"tools": [{"name": "read_thread", "required": True}]}
    return client.put(f"/v1/configs/{quote(config, safe='')}", json={"spec": spec},
                      headers=auth(OPERATOR))


def test_an_example_config_id_registers_and_reads_back_over_http(client: FlaskClient) -> None:
    """PUT and GET /v1/configs/summarizer@2026-10-02 work; an id with a space is a clear 422."""
    r = _put_config(client, "summarizer@2026-10-02")
    assert r.status_code == 201, r.json
    r = client.get("/v1/configs/summarizer@2026-10-02/criteria", headers=auth(CALLER))
    assert r.status_code == 200 and r.json["config"] == "summarizer@2026-10-02", r.json
    bad = _put_config(client, "summarizer 2026")
    assert bad.status_code == 422 and bad.json["error"]["details"]["field"] == "config"
    assert "whitespace" in bad.json["error"]["message"]


def test_a_binding_stored_before_the_rule_still_reads_and_rolls_back(
        client: FlaskClient, redis_conn: redis.Redis) -> None:
    """An id the rule now refuses, stored by an older version: readable, movable, not writable."""
    r = client.put("/v1/bindings/legacy", headers=auth(OPERATOR),
                   json={"current": "old-cfg", "candidate": "new-cfg", "stage": "canary",
                         "share": 0.2})
    assert r.status_code == 201, r.json
    # Rename the stored ids as an older version, which allowed spaces, would have written them.
    raw = json.loads(redis_conn.hget(binding_key("legacy"), "record"))
    raw["binding"].update(current="old cfg", candidate="new cfg")
    redis_conn.hset(binding_key("legacy"), "record", json.dumps(raw))
    r = client.get("/v1/bindings/legacy", headers=auth(CALLER))
    assert r.status_code == 200 and r.json["binding"]["current"] == "old cfg", r.json
    r = client.post("/v1/bindings/legacy/rollback", json={"reason": "bad canary"},
                    headers=auth(OPERATOR))
    assert r.status_code == 200 and r.json["binding"]["stage"] == "rolled_back", r.json
    r = client.put("/v1/bindings/legacy", headers={**auth(OPERATOR), "If-Match": "2"},
                   json={"current": "old cfg"})
    assert r.status_code == 422 and "config id" in r.json["error"]["message"], r.json
