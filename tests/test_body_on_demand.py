"""Config bodies on demand (issue 38): the SDK holds each body's version, and fetches the body
the first time a resolve needs it.

`GET /v1/bindings?bodies=versions` (and its watch) names each body by the config
version whose body it is; the default answer and `?view=full` still carry every
body. The client fetches a body once per version (a refresh or watch that leaves it
unchanged refetches nothing), serves a changed one from its new version, keeps the
fetched ones in a saved snapshot, and raises `BodyUnavailable` rather than answer
without the body when the router cannot give it.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from rolegate import Client
from rolegate.body_cache import BodyCache
from rolegate.errors import BodyUnavailable
from tests.conftest import CALLER, OPERATOR, auth
from tests.live import (
    LiveRouter,
    put_role,
    router,  # noqa: F401  (the pytest fixture the tests below take)
    wait_for,
)
from tests.test_config_bodies import AGENT_BODY, COMPLETION_BODY, put_config


def test_bodies_versions_names_each_body_by_its_config_version(client: FlaskClient) -> None:
    """?bodies=versions answers body_versions, no bodies; the default and view=full keep them."""
    put_config(client, "sum-v1", body=AGENT_BODY)
    put_config(client, "sum-v1", body={**AGENT_BODY, "instructions": "Second."})
    put_config(client, "sum-v2", body=COMPLETION_BODY)
    client.put("/v1/bindings/summarizer", json={"current": "sum-v1", "candidate": "sum-v2",
                                                "stage": "shadow"}, headers=auth(OPERATOR))
    client.put("/v1/bindings/plain", json={"current": "no-body"}, headers=auth(OPERATOR))
    lean = client.get("/v1/bindings?bodies=versions", headers=auth(CALLER)).json
    assert lean["body_versions"] == {"sum-v1": 2, "sum-v2": 1} and "bodies" not in lean
    for query in ("", "?view=full", "?bodies=inline"):
        whole = client.get(f"/v1/bindings{query}", headers=auth(CALLER)).json
        assert sorted(whole["bodies"]) == ["sum-v1", "sum-v2"] and "body_versions" not in whole
    watched = client.get("/v1/bindings/watch?generation=0&timeout=0&bodies=versions",
                         headers=auth(CALLER)).json
    assert watched["body_versions"] == lean["body_versions"]
    # The version named is the one whose record holds that very body.
    record = client.get("/v1/configs/sum-v1/versions/2", headers=auth(CALLER)).json
    assert record["body"]["instructions"] == "Second."
    for path in ("/v1/bindings", "/v1/bindings/watch"):
        bad = client.get(path, query_string={"bodies": "all"}, headers=auth(CALLER))
        assert bad.status_code == 400 and bad.json["error"]["details"]["field"] == "bodies"


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Record every body the clients fetch from the router (the real fetch still runs)."""
    fetched: list[tuple[str, int]] = []
    real = BodyCache._fetch

    def fetch(self: BodyCache, config: str, version: int) -> dict[str, Any]:
        fetched.append((config, version))
        return real(self, config, version)

    monkeypatch.setattr(BodyCache, "_fetch", fetch)
    return fetched


def test_a_body_is_fetched_once_per_version_when_first_needed(
        router: LiveRouter, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is fetched until a resolve needs it; an unchanged body survives new snapshots;
    a changed body is served from its new version."""
    fetched = _counting(monkeypatch)
    router.api("PUT", "/v1/configs/sum-v1", json={"body": AGENT_BODY})
    router.api("PUT", "/v1/configs/sum-v2", json={"body": COMPLETION_BODY})
    put_role(router, "summarizer", current="sum-v1", candidate="sum-v2", stage="canary",
             share=0.5)
    put_role(router, "plain", current="no-body")
    with Client(router.url, CALLER, refresh_interval=0.05) as client:
        assert fetched == [] and "body" not in client.resolve("plain", "k")
        seen = {}
        for n in range(40):
            answer = client.resolve("summarizer", f"job-{n}")
            seen[answer["config"]] = answer
        # The very body the table carries inline.
        inline = router.api("GET", "/v1/bindings", token=CALLER)["bodies"]
        assert seen["sum-v1"]["body"] == inline["sum-v1"]
        assert seen["sum-v2"]["body"]["mode"] == "completion"
        assert sorted(fetched) == [("sum-v1", 1), ("sum-v2", 1)]
        # Another role changes: a new snapshot, the same body versions, nothing refetched.
        generation = client.generation
        put_role(router, "plain-2", current="no-body-2")
        wait_for(lambda: client.generation > generation)
        assert client.resolve("summarizer", "job-0")["body"]["model"]["name"] in (
            "gpt-test", "small-1")
        assert len(fetched) == 2
        router.api("PUT", "/v1/configs/sum-v1",
                   json={"body": {**AGENT_BODY, "instructions": "Changed."}})
        wait_for(lambda: any(
            client.resolve("summarizer", f"job-{n}").get("body", {}).get("instructions")
            == "Changed." for n in range(40)))
        assert sorted(fetched) == [("sum-v1", 1), ("sum-v1", 2), ("sum-v2", 1)]


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_an_unreachable_router_at_first_need_raises_and_never_answers_without_the_body(
        router: LiveRouter, tmp_path: Path) -> None:
    """A body never fetched cannot be served: BodyUnavailable names the config and version;
    roles without a body still resolve; a snapshot saved after a fetch serves that body."""
    router.api("PUT", "/v1/configs/sum-v1", json={"body": AGENT_BODY})
    put_role(router, "summarizer", current="sum-v1")
    put_role(router, "plain", current="no-body")
    table = router.api("GET", "/v1/bindings?bodies=versions", token=CALLER)
    assert table["body_versions"] == {"sum-v1": 1}
    down = _closed_port()
    with Client(down, CALLER, bootstrap=table, start_timeout=0, subscribe=False,
                refresh_interval=3600.0, timeout=0.5, report_attempts=1) as offline:
        with pytest.raises(BodyUnavailable) as raised:
            offline.resolve("summarizer", "k")
        assert raised.value.details["config"] == "sum-v1" and raised.value.details["version"] == 1
        with pytest.raises(BodyUnavailable):  # asked again, still not answered without it
            offline.resolve("summarizer", "k")
        assert offline.resolve("plain", "k")["config"] == "no-body"
    saved = tmp_path / "bindings.json"
    with Client(router.url, CALLER, refresh_interval=0.05) as online:
        assert online.resolve("summarizer", "k")["body"]["instructions"] == \
            AGENT_BODY["instructions"]
        online.save(saved)
    assert json.loads(saved.read_text())["body_versions"] == {"sum-v1": 1}
    with Client(down, CALLER, bootstrap=saved, start_timeout=0, subscribe=False,
                refresh_interval=3600.0, timeout=0.5, report_attempts=1) as restarted:
        assert restarted.resolve("summarizer", "k")["body"]["instructions"] == \
            AGENT_BODY["instructions"]
