"""GET /v1/roles/<role>/golden reads a bounded number of traces and says when it cut."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from router.api import feedback
from tests.conftest import CALLER, OPERATOR, auth

BINDING = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5}
STAMPS = {"agent_version": "1", "instruction_hash": "sha256:1", "model_id": "m",
          "tool_schema_hash": "sha256:2"}


def test_golden_reads_at_most_the_scan_limit_per_arm(client: FlaskClient,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With more traces than the limit, only the newest are read and `truncated` says so."""
    monkeypatch.setattr(feedback, "GOLDEN_SCAN_LIMIT", 5)
    assert client.put("/v1/bindings/summarizer", json=BINDING,
                      headers=auth(OPERATOR)).status_code == 201
    traces = [{"run_id": f"r{i}", "role": "summarizer", "config": "cfg_a", "arm": "current",
               "key": f"k{i}", "tools": ["read_file"], "answered": True, "stamps": STAMPS}
              for i in range(8)]
    assert client.post("/v1/traces", json={"traces": traces},
                       headers=auth(CALLER)).status_code == 200
    r = client.get("/v1/roles/summarizer/golden?min_age=0", headers=auth(CALLER))
    assert r.status_code == 200, r.json
    assert r.json["scanned"] == {"traces": 5, "limit_per_arm": 5, "truncated": True}
    assert {c["trace"]["run_id"] for c in r.json["cases"]} <= {f"r{i}" for i in range(3, 8)}
    monkeypatch.setattr(feedback, "GOLDEN_SCAN_LIMIT", 100)
    r = client.get("/v1/roles/summarizer/golden?min_age=0", headers=auth(CALLER))
    assert r.json["scanned"] == {"traces": 8, "limit_per_arm": 100, "truncated": False}
