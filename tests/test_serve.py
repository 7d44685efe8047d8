"""The router under real gunicorn: changes reach every worker, the embedded Redis keeps data."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from router.server.embedded import LOCK_FILE, EmbeddedError, EmbeddedRedis
from tests.conftest import CALLER, OPERATOR, TOKENS, auth
from tests.deadlines import scaled
from tests.servers import ROOT, base_env, free_port, gunicorn, process, rolegate_serve, wait_for

EXAMPLE = ROOT / "bindings.example.json"
CANARY: dict[str, Any] = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary",
                          "share": 0.5}

pytestmark = pytest.mark.slow


def _resolve(url: str) -> tuple[str, str]:
    """One resolve on a fresh connection: (answering worker's pid, stage)."""
    r = requests.get(f"{url}/v1/resolve/summarizer?key=job-1",
                     headers={**auth(CALLER), "Connection": "close"}, timeout=2)
    assert r.status_code == 200, r.text
    return r.headers["X-Rolegate-Worker"], r.json()["stage"]


def _until_both_workers(url: str, want_stage: str, timeout: float) -> set[str]:
    """Resolve until two different workers have answered; every answer must be `want_stage`."""
    seen: set[str] = set()
    deadline = time.monotonic() + scaled(timeout)
    while len(seen) < 2:
        assert time.monotonic() < deadline, f"only workers {seen} answered within {timeout}s"
        worker, stage = _resolve(url)
        assert stage == want_stage, f"worker {worker} still answers {stage}"
        seen.add(worker)
    return seen


def test_rollback_reaches_every_gunicorn_worker_within_a_second(redis_url: str) -> None:
    """After a rollback through one worker, every worker answers rolled_back within 1 s."""
    env = base_env(REDIS_URL=redis_url, ROLEGATE_TOKENS=TOKENS)
    with gunicorn(env, workers=2) as url:
        r = requests.put(f"{url}/v1/bindings/summarizer", json=CANARY, headers=auth(OPERATOR),
                         timeout=5)
        assert r.status_code == 201, r.text
        # Both workers must have loaded the canary before the rollback: poll until two
        # workers answered it (one still on its old copy answers 404, not yet the role).
        loaded: set[str] = set()

        def both_loaded() -> bool:
            r = requests.get(f"{url}/v1/resolve/summarizer?key=job-1",
                             headers={**auth(CALLER), "Connection": "close"}, timeout=2)
            if r.status_code == 200 and r.json()["stage"] == "canary":
                loaded.add(r.headers["X-Rolegate-Worker"])
            return len(loaded) == 2

        wait_for(both_loaded, 10, "both workers to load the canary")
        r = requests.post(f"{url}/v1/bindings/summarizer/rollback", json={"reason": "bad"},
                          headers=auth(OPERATOR), timeout=5)
        assert r.status_code == 200, r.text
        rolled_back_at = time.monotonic()
        time.sleep(max(0.0, rolled_back_at + 1.0 - time.monotonic()))
        workers = _until_both_workers(url, "rolled_back", timeout=10)
        assert len(workers) == 2


def _valkey_processes(data_dir: Path) -> list[str]:
    """Pids of running valkey-servers working in `data_dir` (valkey chdirs to its --dir)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (os.readlink(proc / "cwd") == str(data_dir.resolve())
                    and os.readlink(proc / "exe").endswith("valkey-server")):
                found.append(proc.name)
        except OSError:
            continue
    return found


def test_serve_embedded_restart_keeps_bindings_and_history(tmp_path: Path) -> None:
    """With no REDIS_URL, serve seeds an empty table once; a restart keeps every change."""
    data_dir = tmp_path / "data"
    env = base_env(ROLEGATE_DATA_DIR=str(data_dir), ROLEGATE_TOKENS=TOKENS)
    with rolegate_serve(env, "--seed", str(EXAMPLE)) as url:
        table = requests.get(f"{url}/v1/bindings", headers=auth(OPERATOR), timeout=5).json()
        assert sorted(table["roles"]) == ["sql-analyst", "summarizer", "support-triage"]
        r = requests.post(f"{url}/v1/bindings/summarizer/rollback",
                          json={"reason": "tables vanished"}, headers=auth(OPERATOR), timeout=5)
        assert r.status_code == 200 and r.json()["version"] == 2
        assert _valkey_processes(data_dir)
    assert _valkey_processes(data_dir) == [], "the embedded server outlived serve"

    with rolegate_serve(env, "--seed", str(EXAMPLE)) as url:
        history = requests.get(f"{url}/v1/bindings/summarizer/history", headers=auth(OPERATOR),
                               timeout=5).json()["entries"]
        assert [(e["version"], e["action"], e["reason"]) for e in history] == [
            (2, "rollback", "tables vanished"),
            (1, "create", "loaded from bindings.example.json on first start"),
        ]
        answer = requests.get(f"{url}/v1/resolve/summarizer?key=k", headers=auth(CALLER),
                              timeout=5).json()
        assert answer["stage"] == "rolled_back" and answer["version"] == 2
    assert _valkey_processes(data_dir) == []


def test_serve_refuses_an_invalid_seed_file(tmp_path: Path) -> None:
    """serve exits 1 before starting anything when the seed file is invalid."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"roles": {"x": {"current": "a", "stage": "canary", "share": 0.5}}}')
    done = subprocess.run([sys.executable, "-m", "router.cli", "serve", "--seed", str(bad)],
                          env=base_env(ROLEGATE_DATA_DIR=str(tmp_path / "d")), cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "candidate" in done.stderr
    assert not (tmp_path / "d").exists()


def test_one_data_dir_is_served_by_one_embedded_server(tmp_path: Path) -> None:
    """A second embedded server on a data dir in use refuses to start."""
    first = EmbeddedRedis(tmp_path)
    first.start()
    try:
        with pytest.raises(EmbeddedError, match="another rolegate server"):
            EmbeddedRedis(tmp_path).start()
    finally:
        first.stop()
    again = EmbeddedRedis(tmp_path)
    again.start()
    again.stop()


def test_embedded_server_stops_when_the_master_is_killed(tmp_path: Path) -> None:
    """SIGKILL on gunicorn's master still stops the embedded server, and data survives."""
    data_dir = tmp_path / "data"
    env = base_env(ROLEGATE_DATA_DIR=str(data_dir), ROLEGATE_TOKENS=TOKENS)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "router.cli", "serve", "--port", str(port), "--workers", "1",
            "--seed", str(EXAMPLE)]
    with process(argv, env, url) as master:
        r = requests.post(f"{url}/v1/bindings/summarizer/pause", json={"reason": "freeze"},
                          headers=auth(OPERATOR), timeout=5)
        assert r.status_code == 200
        master.kill()
        master.wait(10)
        deadline = time.monotonic() + scaled(10)
        while _valkey_processes(data_dir):
            assert time.monotonic() < deadline, "the embedded server outlived a killed master"
            time.sleep(0.05)
    # Gunicorn's orphaned worker (which inherited the data dir's lock) notices its
    # master is gone and exits; then the directory is free for a new start.
    deadline = time.monotonic() + scaled(15)
    while not _lock_free(data_dir / LOCK_FILE):
        assert time.monotonic() < deadline, "the data dir stayed locked"
        time.sleep(0.1)
    with rolegate_serve(env) as again:
        record = requests.get(f"{again}/v1/bindings/summarizer", headers=auth(OPERATOR),
                              timeout=5).json()
        assert record["binding"]["paused"] is True and record["version"] == 2


def _lock_free(path: Path) -> bool:
    """True if nobody holds the embedded server's lock on `path`."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True
