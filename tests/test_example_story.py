"""The README's story on the shipped bindings.example.json, end to end.

`rolegate serve --seed bindings.example.json` (real gunicorn, two workers), a
simulated agent population resolving each job with the callers' own bucketing
function and reporting its traces over HTTP, and the real `rolegate gatekeeper`
process: the shadow role (support-triage) walks to stable on healthy traces,
the canary role (summarizer) is rolled back on failing ones, and the stable role
(sql-analyst) is left alone. Only the timing fields of the shipped policies are
shortened (through the API), so the test runs in seconds; everything else is
the file as shipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self

import pytest
import requests

from bindings.models import BindingFile
from rolegate.routing import Stage, resolve
from tests.conftest import CALLER, GATEKEEPER, OPERATOR, TOKENS, auth
from tests.servers import ROOT, base_env, rolegate_serve, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.walkthrough]

EXAMPLE = ROOT / "bindings.example.json"
#: The only fields the test changes in the shipped policies: how long stages last.
TIMING_FIELDS = {"min_stage_seconds": 0.3, "bake_seconds": 0.6}
STAMPS = {"agent_version": "story-1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
TABLE = "| queue | tickets |\n|---|---:|\n| billing | 12 |\n"


def _summary(config: str, job: int) -> dict[str, Any]:
    """A summarizer run: the current config keeps the table; the candidate drops it."""
    keeps_table = config == "summarizer@2026-10-02" and job % 40 != 0
    return {"tools": ["read_thread", "write_file"], "step_count": 4,
            "artifacts": ["handoff.md"], "cost_usd": 0.02,
            "output_text": "Handoff\n\n" + (TABLE if keeps_table else "billing: 12 tickets\n")}


def _triage(config: str, job: int) -> dict[str, Any]:
    """A support-triage run: both configs label and route every ticket."""
    return {"tools": ["search_tickets", "read_ticket", "set_label", "assign_queue"],
            "step_count": 4, "output_text": "labelled billing, routed to queue B"}


def _analyst(config: str, job: int) -> dict[str, Any]:
    """A sql-analyst run: answers with a table."""
    return {"tools": ["run_query"], "step_count": 3, "artifacts": ["answer.md"],
            "cost_usd": 0.05, "output_text": "Revenue by region\n\n" + TABLE}


RUNS: dict[str, Callable[[str, int], dict[str, Any]]] = {
    "summarizer": _summary, "support-triage": _triage, "sql-analyst": _analyst}


class Agents:
    """Callers of every example role: resolve each job in-process, report its traces.

    Each round reads the binding table (as a caller's snapshot would), runs
    `jobs[role]` jobs per role and posts their traces in one batch. Refusals are
    kept: the only acceptable one is a late trace of a config the role no longer runs.
    """

    def __init__(self, url: str, jobs: dict[str, int]) -> None:
        self.url = url
        self.jobs = jobs
        self.count = 0
        self.refusals: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, daemon=True)
        self._session = requests.Session()
        self._session.headers.update(auth(CALLER))

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(20)
        self._session.close()

    def round(self) -> None:
        """One batch of jobs for every role."""
        with self._session.get(f"{self.url}/v1/bindings", timeout=10) as answer:
            answer.raise_for_status()
            table = answer.json()["roles"]
        traces = []
        for role, jobs in self.jobs.items():
            record = table[role]
            binding = _Routable(record["binding"])
            for _ in range(jobs):
                self.count += 1
                key = f"job-{self.count}"
                where = resolve(role, binding, record["version"], key)
                arms = [(where["config"], where["arm"])]
                if where["shadow"] is not None:
                    arms.append((where["shadow"], "shadow"))
                for config, arm in arms:
                    traces.append({"run_id": f"{role}-{arm}-{self.count}", "role": role,
                                   "config": config, "arm": arm, "key": key, "stamps": STAMPS,
                                   **RUNS[role](config, self.count)})
        with self._session.post(f"{self.url}/v1/traces", json={"traces": traces},
                                timeout=30) as answer:
            if answer.status_code not in (200, 207):
                self.errors.append(f"{answer.status_code} {answer.text[:500]}")
                return
            self.refusals += [r for r in answer.json()["results"] if r["status"] == "refused"]

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                self.round()
            except requests.RequestException as exc:
                self.errors.append(str(exc))
            self._stop.wait(0.02)


class _Routable:
    """A binding's routing fields read from its JSON (what the bucketing function needs)."""

    def __init__(self, binding: dict[str, Any]) -> None:
        self.current: str = binding["current"]
        self.candidate: str | None = binding["candidate"]
        self.stage = Stage(binding["stage"])
        self.share: float = binding["share"]
        self.holdback: float = binding.get("holdback", 0.0)
        self.bucket_by: str | None = binding.get("bucket_by")
        self.salt: str | None = binding.get("salt")
        self.bucket_version: int = binding.get("bucket_version", 1)


@contextmanager
def gatekeeper_process(url: str) -> Iterator[subprocess.Popen[bytes]]:
    """`rolegate gatekeeper` as its own process, stopped with SIGTERM; its log must hold no ERROR."""
    argv = [sys.executable, "-m", "router.cli", "gatekeeper", "--interval", "0.1", "-v"]
    env = base_env(ROLEGATE_URL=url, ROLEGATE_TOKEN=GATEKEEPER, ROLEGATE_RETRY_NO_WAIT="1")
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            log.seek(0)
            output = log.read().decode(errors="replace")
        if os.environ.get("ROLEGATE_TEST_VERBOSE"):
            print(f"--- gatekeeper ---\n{output[-8000:]}")
        assert " ERROR " not in output, output[-4000:]


def _api(method: str, url: str, token: str = OPERATOR, **kwargs: Any) -> Any:
    headers = {**auth(token), **kwargs.pop("headers", {})}
    with requests.request(method, url, headers=headers, timeout=10, **kwargs) as answer:
        assert answer.ok, (answer.status_code, answer.text)
        return answer.json()


def _shorten_stages(url: str, role: str) -> None:
    """Change only the stage timing of the role's shipped policy, through the API."""
    record = _api("GET", f"{url}/v1/bindings/{role}")
    binding = record["binding"]
    binding["gate"]["thresholds"].update(TIMING_FIELDS)
    _api("PUT", f"{url}/v1/bindings/{role}", headers={"If-Match": str(record["version"])},
         json={"binding": binding, "reason": "test: shorter stages"})


def _stage(url: str, role: str) -> str:
    return str(_api("GET", f"{url}/v1/bindings/{role}", CALLER)["binding"]["stage"])


def _without_timing(binding: dict[str, Any]) -> dict[str, Any]:
    thresholds = {k: v for k, v in binding["gate"]["thresholds"].items()
                  if k not in TIMING_FIELDS}
    kept = {k: v for k, v in binding.items() if k not in ("stage_since",)}
    return {**kept, "gate": {**binding["gate"], "thresholds": thresholds}}


def test_readme_story_on_the_shipped_example(redis_url: str) -> None:
    """On bindings.example.json: shadow -> stable when healthy, canary rolled back when failing."""
    shipped = {role: binding.model_dump(mode="json") for role, binding in
               BindingFile.model_validate_json(EXAMPLE.read_bytes()).roles.items()}
    env = base_env(REDIS_URL=redis_url, ROLEGATE_TOKENS=TOKENS)
    with rolegate_serve(env, "--seed", str(EXAMPLE), workers=2) as url:
        for role, binding in shipped.items():
            _shorten_stages(url, role)
            # The policy under test is the shipped one, timing aside.
            served = _api("GET", f"{url}/v1/bindings/{role}", CALLER)["binding"]
            assert _without_timing(served) == _without_timing(binding)
        # Every example role can be judged: its gate view answers.
        for role in shipped:
            view = _api("GET", f"{url}/v1/roles/{role}/gate", CALLER)
            assert view["current"] == shipped[role]["current"]

        jobs = {"support-triage": 400, "summarizer": 60, "sql-analyst": 20}
        with gatekeeper_process(url), Agents(url, jobs) as agents:
            wait_for(lambda: _stage(url, "summarizer") == "rolled_back", 120,
                     "summarizer's failing canary to be rolled back")
            wait_for(lambda: _stage(url, "support-triage") == "stable", 240,
                     "support-triage's healthy shadow to reach stable")
        assert agents.errors == []
        assert {r["error"]["code"] for r in agents.refusals} <= {"config_not_bound"}

        triage = _api("GET", f"{url}/v1/bindings/support-triage", CALLER)["binding"]
        assert triage["current"] == "triage@2026-11-25" and triage["candidate"] is None
        walk = [(e["action"], e["binding"]["stage"], e["binding"]["share"], e["actor"])
                for e in reversed(_api("GET", f"{url}/v1/bindings/support-triage/history",
                                       CALLER)["entries"])]
        assert walk[2:] == [("promote", "canary", 0.05, "gatekeeper"),
                            ("promote", "canary", 0.2, "gatekeeper"),
                            ("promote", "canary", 0.5, "gatekeeper"),
                            ("promote", "full", 1.0, "gatekeeper"),
                            ("promote", "stable", 0.0, "gatekeeper")]
        summarizer = _api("GET", f"{url}/v1/bindings/summarizer/history", CALLER)["entries"]
        assert (summarizer[0]["action"], summarizer[0]["actor"]) == ("rollback", "gatekeeper")
        assert summarizer[0]["binding"]["current"] == "summarizer@2026-10-02"
        assert _stage(url, "sql-analyst") == "stable"
        assert len(_api("GET", f"{url}/v1/bindings/sql-analyst/history", CALLER)
                   ["entries"]) == 2  # created, then the test's timing change
