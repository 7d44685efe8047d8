"""deploy/kubernetes as an operator applies it (issue 36): rendered with kustomize, valid for
Kubernetes 1.30 and 1.37, locked down, linted with checkov, and its router env on a real router."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import redis
import requests
import yaml

from tests.conftest import CALLER, OPERATOR, auth
from tests.servers import OwnRedis, base_env, gunicorn, wait_for

ROOT = Path(__file__).resolve().parent.parent
KUBE = ROOT / "deploy" / "kubernetes"
KUBE_VERSIONS = ("1.30.0", "1.37.0")
#: Kinds kustomize leaves without a namespace (the ones these files use).
CLUSTER_SCOPED = {"Namespace"}
WORKLOADS = {"Deployment", "StatefulSet"}


def _kustomization() -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((KUBE / "kustomization.yaml").read_text())
    return found


def render_in_python() -> list[dict[str, Any]]:
    """What `kubectl kustomize deploy/kubernetes` makes of these files: the resources, each
    namespaced one in `namespace`, and each image named in `images` replaced."""
    kustomization = _kustomization()
    docs = [doc for name in kustomization["resources"]
            for doc in yaml.safe_load_all((KUBE / name).read_text()) if doc]
    images = {entry["name"]: entry for entry in kustomization.get("images", [])}
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = kustomization["namespace"]
        for container in _containers(doc):
            entry = images.get(re.split(r"[:@]", container["image"], maxsplit=1)[0])
            if entry is not None:
                container["image"] = (f"{entry.get('newName', entry['name'])}:"
                                      f"{entry['newTag']}")
    return docs


def render() -> list[dict[str, Any]]:
    """The rendering: kubectl's own where installed, else the same in Python."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return render_in_python()
    out = subprocess.run([kubectl, "kustomize", str(KUBE)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


RENDERED = render()


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"] not in WORKLOADS:
        return []
    spec = doc["spec"]["template"]["spec"]
    found: list[dict[str, Any]] = spec["containers"] + spec.get("initContainers", [])
    return found


def find(kind: str, name: str) -> dict[str, Any]:
    """The one rendered resource of `kind` named `name`."""
    return next(doc for doc in RENDERED
                if doc["kind"] == kind and doc["metadata"]["name"] == name)


def _key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def test_the_python_rendering_is_kubectls() -> None:
    """The fallback renders exactly what kubectl kustomize does (where kubectl is here)."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: the Python rendering stands in for it")
    assert sorted(render_in_python(), key=_key) == sorted(RENDERED, key=_key)


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_every_rendered_resource_is_valid_kubernetes(version: str) -> None:
    """kubernetes-validate (Kubernetes' OpenAPI schemas, strict) accepts each resource."""
    kinds = sorted({doc["kind"] for doc in RENDERED})
    assert kinds == ["Deployment", "Ingress", "Namespace", "NetworkPolicy",
                     "PodDisruptionBudget", "Service", "StatefulSet"]
    for doc in RENDERED:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_refuses_a_broken_manifest() -> None:
    """The same check fails on a probe with a misspelt field: it can fail."""
    broken = copy.deepcopy(find("Deployment", "rolegate-router"))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pth"] = "/"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSIONS[0], strict=True)


def test_every_container_is_locked_down() -> None:
    """Non-root (a high uid), read-only root, no escalation, no capabilities, RuntimeDefault
    seccomp, no service account token; everything in the rolegate namespace."""
    workloads = [doc for doc in RENDERED if doc["kind"] in WORKLOADS]
    assert len(workloads) == 3
    for doc in workloads:
        pod = doc["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, doc["metadata"]["name"]
        for container in _containers(doc):
            context = {**pod.get("securityContext", {}), **container["securityContext"]}
            where = f"{doc['metadata']['name']}/{container['name']}"
            assert context["runAsNonRoot"] is True, where
            assert context["runAsUser"] >= 10000, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
    assert {doc["metadata"].get("namespace") for doc in RENDERED
            if doc["kind"] != "Namespace"} == {"rolegate"}
    labels = find("Namespace", "rolegate")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container["env"]}


def _quantity_bytes(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "kb": 2**10, "mb": 2**20, "gb": 2**30}
    number, unit = re.fullmatch(r"(\d+)([A-Za-z]*)", text).groups()  # type: ignore[union-attr]
    return int(number) * units.get(unit, 1)


def test_redis_refuses_writes_at_its_cap_needs_a_password_and_only_routers_reach_it() -> None:
    """maxmemory under the container's limit with noeviction; requirepass from the Secret,
    which the router's REDIS_URL and the probes use; a NetworkPolicy admits router pods."""
    (container,) = find("StatefulSet", "rolegate-redis")["spec"]["template"]["spec"][
        "containers"]
    args = container["args"]
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    cap = _quantity_bytes(args[args.index("--maxmemory") + 1])
    limit = _quantity_bytes(container["resources"]["limits"]["memory"])
    assert 0 < cap <= 0.8 * limit
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    env = _env(container)
    secret = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert secret == {"name": "rolegate-redis", "key": "password"}
    assert env["REDISCLI_AUTH"]["value"] == "$(REDIS_PASSWORD)"
    (router,) = find("Deployment", "rolegate-router")["spec"]["template"]["spec"]["containers"]
    router_env = _env(router)
    assert router_env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == secret
    service = find("Service", "rolegate-redis")
    assert router_env["REDIS_URL"]["value"] == (
        f"redis://:$(REDIS_PASSWORD)@{service['metadata']['name']}:"
        f"{service['spec']['ports'][0]['port']}/0")
    names = list(router_env)
    assert names.index("REDIS_PASSWORD") < names.index("REDIS_URL")  # $(...) sees only earlier
    policy = find("NetworkPolicy", "rolegate-redis")["spec"]
    redis_labels = find("StatefulSet", "rolegate-redis")["spec"]["template"]["metadata"]["labels"]
    router_labels = find("Deployment", "rolegate-router")["spec"]["template"]["metadata"][
        "labels"]
    assert policy["podSelector"]["matchLabels"] == redis_labels
    [rule] = policy["ingress"]
    assert [peer["podSelector"]["matchLabels"] for peer in rule["from"]] == [router_labels]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6379}]


def test_the_manifests_wire_router_gatekeeper_and_redis_together() -> None:
    """Probes (/readyz, /livez), the services' names and ports, the tokens mount, one loop
    outside gunicorn, and every file listed in the kustomization."""
    (container,) = find("Deployment", "rolegate-router")["spec"]["template"]["spec"][
        "containers"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    for probe in ("livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/livez", "port": "http"}
    env = {name: e.get("value") for name, e in _env(container).items()}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tokens")
    assert env["ROLEGATE_TOKENS_FILE"].startswith(mount["mountPath"] + "/")
    assert "subPath" not in mount  # a subPath mount never sees the Secret change
    data = next(m for m in container["volumeMounts"] if m["name"] == "data")
    assert env["ROLEGATE_DATA_DIR"] == data["mountPath"]
    (loop,) = find("Deployment", "rolegate-gatekeeper")["spec"]["template"]["spec"]["containers"]
    assert loop["command"] == ["rolegate", "gatekeeper"]
    service = find("Service", "rolegate-router")
    assert _env(loop)["ROLEGATE_URL"]["value"] == (
        f"http://rolegate-router:{service['spec']['ports'][0]['port']}")
    assert "rolegate-router" in env["ROLEGATE_ALLOWED_HOSTS"].split(",")
    listed = _kustomization()["resources"]
    assert sorted(listed) == sorted(p.name for p in KUBE.glob("*.yaml")
                                    if p.name != "kustomization.yaml")


def test_one_image_name_and_tag_for_compose_and_the_manifests() -> None:
    """rolegate:<pyproject version>: the documented build, compose's default, kustomize's."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    [entry] = _kustomization()["images"]
    assert entry["name"] == "rolegate" and entry["newTag"] == version
    images = {c["image"] for doc in RENDERED for c in _containers(doc)
              if not c["image"].startswith("redis:")}
    assert images == {f"{entry['newName']}:{version}"}
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["services"]
    for service in ("router", "gatekeeper"):
        assert compose[service]["image"] == f"${{ROLEGATE_IMAGE:-rolegate:{version}}}"
    build = f"docker build -f deploy/Dockerfile -t rolegate:{version} ."
    assert build in (ROOT / "docs" / "maintenance.md").read_text()
    assert build in (ROOT / "deploy" / "Dockerfile").read_text()


def _checkov() -> str:
    found = os.environ.get("ROLEGATE_CHECKOV") or shutil.which("checkov")
    if not found:
        pytest.skip("checkov is not installed (pip install checkov, or ROLEGATE_CHECKOV=path)")
    return found


def _checkov_failures(checkov: str, docs: list[dict[str, Any]], where: Path) -> list[str]:
    where.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    run = subprocess.run([checkov, "-f", str(where), "--framework", "kubernetes", "--quiet",
                          "--compact", "-o", "json"], capture_output=True, text=True,
                         timeout=300)
    report = json.loads(run.stdout)
    reports = report if isinstance(report, list) else [report]
    return sorted(f"{c['check_id']} {c['resource']}" for r in reports
                  for c in r.get("results", {}).get("failed_checks", []))


@pytest.mark.slow
def test_checkov_finds_nothing_and_would_find_a_writable_root(tmp_path: Path) -> None:
    """checkov's Kubernetes checks all pass on the rendering (its skips carry their reason
    in annotations), and fail on the same rendering with a writable root filesystem."""
    checkov = _checkov()
    assert _checkov_failures(checkov, RENDERED, tmp_path / "rendered.yaml") == []
    loosened = copy.deepcopy(RENDERED)
    for doc in loosened:
        for container in _containers(doc):
            container["securityContext"]["readOnlyRootFilesystem"] = False
    failed = _checkov_failures(checkov, loosened, tmp_path / "loosened.yaml")
    assert failed and all(f.startswith("CKV_K8S_22 ") for f in failed), failed


def _expand(value: str, known: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: a variable defined earlier in the list, else left."""
    return re.sub(r"\$\((\w+)\)", lambda m: known.get(m.group(1), m.group(0)), value)


def _manifest_env(redis_port: int, password: str, tokens: Path,
                  data_dir: Path) -> dict[str, str]:
    """The router Deployment's env as the kubelet gives it, with what only a cluster has
    (the Secret, the namespace, the Service's address, the mounts) put here."""
    (container,) = find("Deployment", "rolegate-router")["spec"]["template"]["spec"][
        "containers"]
    namespace = find("Deployment", "rolegate-router")["metadata"]["namespace"]
    known: dict[str, str] = {}
    for entry in container["env"]:
        source = entry.get("valueFrom", {})
        if "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "metadata.namespace"
            value = namespace
        elif "secretKeyRef" in source:
            value = password
        else:
            value = _expand(entry["value"], known)
        known[entry["name"]] = value
    known["REDIS_URL"] = known["REDIS_URL"].replace("@rolegate-redis:6379/",
                                                    f"@127.0.0.1:{redis_port}/")
    known["ROLEGATE_TOKENS_FILE"] = str(tokens)
    known["ROLEGATE_DATA_DIR"] = str(data_dir)
    return known


def _line(name: str, token: str, scope: str) -> str:
    return f"{name}=sha256:{hashlib.sha256(token.encode()).hexdigest()}:{scope}\n"


@pytest.mark.slow
def test_the_router_deployments_env_on_a_real_router(tmp_path: Path) -> None:
    """In-cluster Service names and a pod-IP scrape pass the Host check, a foreign name does
    not; with Redis gone the router stays ready on its kept table while /healthz fails; one
    started with no Redis and no table is alive but not ready."""
    own = OwnRedis(persist=False)
    own.start()
    admin = redis.Redis.from_url(own.url)
    password = "0123456789abcdef0123456789abcdef"
    admin.config_set("requirepass", password)
    tokens = tmp_path / "tokens"
    tokens.write_text(_line("ops", OPERATOR, "operator") + _line("agents", CALLER, "caller"))
    try:
        env = base_env(**_manifest_env(own.port, password, tokens, tmp_path / "data"))
        assert env["ROLEGATE_ALLOWED_HOSTS"].split(",")[:4] == [
            "rolegate-router", "rolegate-router.rolegate", "rolegate-router.rolegate.svc",
            "rolegate-router.rolegate.svc.cluster.local"]
        with gunicorn(env, workers=2) as url:
            assert requests.put(f"{url}/v1/bindings/summarizer", json={"current": "cfg_a"},
                                headers=auth(OPERATOR), timeout=5).status_code == 201
            for host in ("rolegate-router:8080", "rolegate-router.rolegate.svc",
                         "rolegate-router.rolegate.svc.cluster.local:8080",
                         "rolegate.example.com"):
                r = requests.get(f"{url}/v1/resolve/summarizer?key=k",
                                 headers={**auth(CALLER), "Host": host}, timeout=5)
                assert r.status_code == 200, (host, r.text)
            for host in ("10.244.3.17:8080", "[fd00::17]:8080"):
                r = requests.get(f"{url}/metrics", headers={"Host": host}, timeout=5)
                assert r.status_code == 200 and "rolegate_" in r.text, host
            r = requests.get(f"{url}/metrics", headers={"Host": "rebind.attacker.example"},
                             timeout=5)
            assert r.status_code == 400 and r.json()["error"]["code"] == "host_not_allowed"
            assert requests.get(f"{url}/readyz", timeout=5).json() == {"status": "ready",
                                                                      "stale": False}
            # Every worker holds the role before Redis goes, counted by worker pid: six
            # answers in a row can all come from one worker under load.
            holding: set[str] = set()

            def both_hold() -> bool | None:
                got = requests.get(f"{url}/v1/resolve/summarizer?key=k", timeout=5,
                                   headers={**auth(CALLER), "Connection": "close"})
                if got.status_code == 200:
                    holding.add(got.headers["X-Rolegate-Worker"])
                return len(holding) == 2 or None

            wait_for(both_hold, 10, "every worker to hold the table")
            own.stop()
            wait_for(lambda: requests.get(f"{url}/healthz", timeout=5).status_code == 503
                     or None, 10, "/healthz to fail with Redis gone")
            # Each worker marks its table stale at its next poll; both stay ready throughout.
            seen: list[int] = []

            def ready_and_stale() -> bool | None:
                answers = [requests.get(f"{url}/readyz", headers={"Connection": "close"},
                                        timeout=5) for _ in range(6)]
                seen.extend(a.status_code for a in answers)
                return all(a.json()["stale"] for a in answers) or None

            wait_for(ready_and_stale, 10, "every worker ready on its kept table")
            assert set(seen) == {200}
            r = requests.get(f"{url}/v1/resolve/summarizer?key=k", headers=auth(CALLER),
                             timeout=5)
            assert r.status_code == 200 and r.json()["stale"] is True
        # Redis still down, a fresh data directory: nothing to answer resolves from.
        fresh = {**env, "ROLEGATE_DATA_DIR": str(tmp_path / "fresh")}
        with gunicorn(fresh, workers=1) as url:
            assert requests.get(f"{url}/livez", timeout=5).status_code == 200
            not_ready = requests.get(f"{url}/readyz", timeout=5)
            assert not_ready.status_code == 503 and not_ready.json()["status"] == "not_ready"
    finally:
        admin.close()
        own.close()
