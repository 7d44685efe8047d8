"""docs/maintenance.md's every command block runs as written, in order, on a fresh clone
(issue 36): against a real Redis and a real gunicorn router, with stand-ins for Docker and
the Kubernetes API (tests/standins/) that check what they are given."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from router.server.embedded import valkey_executable
from tests.conftest import OPERATOR, TOKENS, auth
from tests.servers import OwnRedis, base_env, gunicorn, wait_for
from tests.test_docs_walkthrough import blocks, illustrative

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "maintenance.md"
STANDINS = Path(__file__).resolve().parent / "standins"


def command_blocks() -> list[tuple[str, int]]:
    """(body, line) of each runnable shell block of the page, in order."""
    return [(body, line) for language, body, line in blocks(PAGE)
            if language in ("bash", "sh") and not illustrative(body)]


def fresh_clone(target: Path) -> Path:
    """The checkout's files as a clone has them (tracked and new, none ignored)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def tools(where: Path) -> Path:
    """A directory for PATH: the stand-ins, and redis-cli/redis-server where only valkey is."""
    where.mkdir()
    for standin in STANDINS.iterdir():
        (where / standin.name).symlink_to(standin)
    valkey = Path(valkey_executable()).parent
    for name, bundled in (("redis-server", "valkey-server"), ("redis-cli", "valkey-cli")):
        if shutil.which(name) is None:
            (where / name).symlink_to(valkey / bundled)
    return where


def self_signed(where: Path) -> None:
    """tls.crt and tls.key, the certificate an operator brings."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=rolegate.example.com", "-keyout", str(where / "tls.key"),
                    "-out", str(where / "tls.crt")], check=True, capture_output=True)


def _calls(log: Path, tool: str) -> list[list[Any]]:
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [entry[1:] for entry in lines if entry[0] == tool]


@pytest.mark.slow
@pytest.mark.walkthrough
def test_every_command_of_maintenance_md_runs_as_written(tmp_path: Path) -> None:
    """Back up, change the table, restore the RDB under the running router, accept it, build
    and push the image, create the Secrets and apply the manifests, cap a role's traces."""
    found = command_blocks()
    assert len(found) == 6, [line for _, line in found]
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: the page's secret and certificate need it")
    clone = fresh_clone(tmp_path / "clone")
    self_signed(clone)
    log = tmp_path / "standins.log"
    own = OwnRedis(persist=True)
    own.start()
    restored_port = own.port
    try:
        env = base_env(REDIS_URL=own.url, ROLEGATE_TOKENS=TOKENS,
                       ROLEGATE_DATA_DIR=str(tmp_path / "data"),
                       ROLEGATE_REFRESH_INTERVAL="0.05")
        with gunicorn(env, workers=2) as url:
            op = auth(OPERATOR)
            assert requests.put(f"{url}/v1/bindings/summarizer", json={"current": "cfg_a"},
                                headers=op, timeout=5).status_code == 201
            shell = {**base_env(REDIS_URL=own.url, ROLEGATE_URL=url, ROLEGATE_TOKEN=OPERATOR),
                     "REDIS_DIR": own.dir.name, "REDIS_PORT": str(own.port),
                     "STANDIN_LOG": str(log),
                     "PATH": os.pathsep.join([str(tools(tmp_path / "bin")),
                                              str(Path(sys.executable).parent),
                                              os.environ.get("PATH", "")])}

            def made_after_the_backup() -> None:
                assert requests.put(f"{url}/v1/bindings/late", json={"current": "cfg_l"},
                                    headers=op, timeout=5).status_code == 201
                # Served by every worker before Redis goes back to the backup, as a role made
                # a while before a restore is: a worker that never held it cannot miss it.
                # Counted by worker pid: eight answers in a row can all come from one worker
                # under load, and the other, never holding the role, never reports it lost.
                serving: set[str] = set()

                def both_serve() -> bool | None:
                    got = requests.get(f"{url}/v1/resolve/late?key=k", timeout=5,
                                       headers={**op, "Connection": "close"})
                    if got.status_code == 200:
                        serving.add(got.headers["X-Rolegate-Worker"])
                    return len(serving) == 2 or None

                wait_for(both_serve, 10, "both workers to serve the role made after the backup")

            def every_worker_reports_the_loss() -> None:
                # What an operator waits for: /healthz naming the loss, on every worker.
                told_by: set[str] = set()

                def told() -> bool | None:
                    answers = [requests.get(f"{url}/healthz", timeout=5,
                                            headers={**op, "Connection": "close"})
                               for _ in range(6)]
                    if not all("late" in a.json()["checks"]["bindings"].get("lost_roles", [])
                               for a in answers):
                        return None
                    told_by.update(a.headers["X-Rolegate-Worker"] for a in answers)
                    return len(told_by) == 2 or None

                wait_for(told, 10, "every worker to report the restored Redis as older")

            def backed_up() -> None:
                assert "summarizer" in json.loads((clone / "table.json").read_text())["roles"]
                assert (clone / "backup.rdb").stat().st_size > 0

            def restored() -> None:
                wait_for(lambda: requests.get(f"{url}/v1/resolve/summarizer?key=k",
                                              headers=op, timeout=5).status_code == 200
                         or None, 10, "the router on the restored Redis")

            def accepted() -> None:
                wait_for(lambda: requests.get(f"{url}/v1/resolve/late?key=k", headers=op,
                                              timeout=5).status_code == 410 or None, 10,
                         "the role made after the backup gone")
                [entry, *_] = requests.get(f"{url}/v1/bindings/late/history", headers=op,
                                           timeout=5).json()["entries"]
                assert entry["action"] == "accept_redis"

            def image_pushed() -> None:
                assert [c[0] for c in _calls(log, "docker")] == ["build", "tag", "push"]

            def applied() -> None:
                resources = [c[0] for c in _calls(log, "resource")]
                secrets = {r["metadata"]["name"] for r in resources if r["kind"] == "Secret"}
                assert secrets == {"rolegate-tokens", "rolegate-gatekeeper-token",
                                   "rolegate-redis", "rolegate-tls"}
                lines = (clone / "tokens").read_text().splitlines()
                assert [line.split("=")[0] for line in lines] == ["ops", "gatekeeper", "agents"]
                assert any(r["kind"] == "StatefulSet" for r in resources)

            def capped() -> None:
                binding = requests.get(f"{url}/v1/bindings/summarizer", headers=op,
                                       timeout=5).json()["binding"]
                assert binding["trace_retention"] == 20000 and binding["current"] == "cfg_a"

            before: dict[str, Callable[[], None]] = {
                "SHUTDOWN NOSAVE": made_after_the_backup,
                "accept-redis": every_worker_reports_the_loss}
            after: dict[str, Callable[[], None]] = {
                "BGSAVE": backed_up, "SHUTDOWN NOSAVE": restored, "accept-redis": accepted,
                "docker push": image_pushed, "kubectl apply -k": applied,
                "trace_retention=": capped}
            checked = []
            for body, line in found:
                for marker, step in before.items():
                    if marker in body:
                        step()
                done = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=clone,
                                      env=shell, capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, (line, body, done.stdout[-2000:],
                                              done.stderr[-2000:])
                for marker, step in after.items():
                    if marker in body:
                        step()
                        checked.append(marker)
            assert sorted(checked) == sorted(after)
    finally:
        try:  # the Redis the page started (daemonized) on the same port
            redis.Redis(port=restored_port, socket_timeout=2).shutdown(nosave=True)
        except redis.RedisError:
            pass
        own.close()
