"""docs/maintenance.md's procedures: Kubernetes manifests, token rotation, backup and restore."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import redis
import yaml

from router import create_app
from tests.conftest import OPERATOR, auth
from tests.servers import OwnRedis, wait_for

ROOT = Path(__file__).resolve().parent.parent
KUBE = ROOT / "deploy" / "kubernetes"
KUBE_VERSION = "1.30.0"


def documents() -> list[tuple[str, dict[str, Any]]]:
    """Every resource in deploy/kubernetes/*.yaml but the kustomization, with its file name."""
    found = []
    for path in sorted(KUBE.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def by_kind(kind: str, name: str) -> dict[str, Any]:
    """The one resource of `kind` named `name`."""
    return next(doc for _, doc in documents()
                if doc["kind"] == kind and doc["metadata"]["name"] == name)


@pytest.mark.parametrize("where, doc", documents(),
                         ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in documents()])
def test_each_manifest_is_valid_kubernetes(where: str, doc: dict[str, Any]) -> None:
    """kubernetes-validate (the OpenAPI schemas of Kubernetes, strict) accepts each resource."""
    kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_the_validator_refuses_a_broken_manifest() -> None:
    """The same check fails on a probe with a misspelt field: it can fail."""
    router = by_kind("Deployment", "rolegate-router")
    broken = yaml.safe_load(yaml.safe_dump(router))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pth"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)


def test_the_manifests_wire_router_gatekeeper_and_redis_together() -> None:
    """Probes on /healthz, the services' names and ports, AOF, one loop outside gunicorn."""
    router = by_kind("Deployment", "rolegate-router")["spec"]["template"]["spec"]
    (container,) = router["containers"]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    redis_service = by_kind("Service", "rolegate-redis")
    assert env["REDIS_URL"] == (f"redis://{redis_service['metadata']['name']}:"
                                f"{redis_service['spec']['ports'][0]['port']}/0")
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tokens")
    assert env["ROLEGATE_TOKENS_FILE"].startswith(mount["mountPath"] + "/")
    assert "subPath" not in mount  # a subPath mount never sees the Secret change
    gatekeeper = by_kind("Deployment", "rolegate-gatekeeper")["spec"]["template"]["spec"]
    (loop,) = gatekeeper["containers"]
    assert loop["command"] == ["rolegate", "gatekeeper"]
    router_service = by_kind("Service", "rolegate-router")
    assert {e["name"]: e.get("value") for e in loop["env"]}["ROLEGATE_URL"] == (
        f"http://rolegate-router:{router_service['spec']['ports'][0]['port']}")
    args = by_kind("StatefulSet", "rolegate-redis")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    listed = yaml.safe_load((KUBE / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in KUBE.glob("*.yaml")
                                    if p.name != "kustomization.yaml")


def _line(name: str, token: str, scope: str) -> str:
    return f"{name}=sha256:{hashlib.sha256(token.encode()).hexdigest()}:{scope}\n"


def test_a_token_rotates_without_a_restart(redis_url: str, tmp_path: Path) -> None:
    """Add the new token to the file, move callers, remove the old: both work between, no restart."""
    tokens = tmp_path / "tokens"
    tokens.write_text(_line("ops", OPERATOR, "operator") + _line("agents", "old-secret", "caller"))
    app = create_app({"redis_url": redis_url, "tokens_file": str(tokens), "testing": True})
    client = app.test_client()
    try:
        def status(token: str) -> int:
            return client.get("/v1/bindings", headers=auth(token)).status_code

        assert (status("old-secret"), status("new-secret")) == (200, 401)
        tokens.write_text(tokens.read_text() + _line("agents-2", "new-secret", "caller"))
        wait_for(lambda: status("new-secret") == 200 or None, 10, "the new token")
        assert status("old-secret") == 200  # both work while callers move over
        tokens.write_text(_line("ops", OPERATOR, "operator")
                          + _line("agents-2", "new-secret", "caller"))
        wait_for(lambda: status("old-secret") == 401 or None, 10, "the old token's removal")
        assert status("new-secret") == 200
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


def test_an_rdb_backup_restores_bindings_and_history() -> None:
    """SAVE, copy dump.rdb into a new server's directory: the table and its history come back."""
    source, restored = OwnRedis(persist=False), OwnRedis(persist=False)
    source.start()
    try:
        app = create_app({"redis_url": source.url, "tokens": f"{OPERATOR}:operator",
                          "testing": True})
        client = app.test_client()
        put = client.put("/v1/bindings/summarizer", headers=auth(OPERATOR),
                         json={"current": "sum-v1", "candidate": "sum-v2"})
        assert put.status_code == 201
        moved = client.post("/v1/bindings/summarizer/promote", headers={
            **auth(OPERATOR), "If-Match": "1"}, json={"reason": "shadow first"})
        assert moved.status_code == 200, moved.json
        before = client.get("/v1/bindings/summarizer/history", headers=auth(OPERATOR)).json
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
        # The procedure: BGSAVE (SAVE here, to wait for it), then copy the file.
        admin = redis.Redis.from_url(source.url)
        admin.save()
        backup = Path(source.dir.name) / "dump.rdb"
        admin.close()
        shutil.copy(backup, Path(restored.dir.name) / "dump.rdb")
        restored.start()
        again = create_app({"redis_url": restored.url, "tokens": f"{OPERATOR}:operator",
                            "testing": True})
        try:
            view = again.test_client()
            binding = view.get("/v1/bindings/summarizer", headers=auth(OPERATOR)).json
            assert binding["version"] == 2 and binding["binding"]["stage"] == "shadow"
            assert view.get("/v1/bindings/summarizer/history",
                            headers=auth(OPERATOR)).json == before
        finally:
            again.extensions["rolegate"].cache.stop()
            again.extensions["rolegate"].redis.close()
    finally:
        source.close()
        restored.close()
