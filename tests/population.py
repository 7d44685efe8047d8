"""A simulated agent population: resolves each job's config and reports its trace.

Outcomes are deterministic per (config, job index), so a test knows each
config's true pass rate: `BEHAVIOURS` maps a config name to how it behaves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import requests

from bindings.models import VersionedBinding
from rolegate.routing import resolve
from router.api.traces import NOT_BOUND
from tests.conftest import CALLER, auth

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


def baseline(i: int) -> tuple[bool, bool]:
    """(passed, forbidden call): fails 1 job in 20, like the current config."""
    return i % 20 != 0, False


def regressed(i: int) -> tuple[bool, bool]:
    """Fails 3 jobs in 20: a pass rate 10 points under the baseline."""
    return i % 20 not in (0, 1, 2), False


def broken(i: int) -> tuple[bool, bool]:
    """Fails every other job: a pass rate of 0.5."""
    return i % 2 == 1, False


def forbidden(i: int) -> tuple[bool, bool]:
    """Passes like the baseline, but one job in 25 calls a forbidden tool."""
    return i % 20 != 0, i % 25 == 3


BEHAVIOURS: dict[str, Callable[[int], tuple[bool, bool]]] = {
    "cfg-a": baseline, "cfg-good": baseline, "cfg-bad": regressed, "cfg-forbid": forbidden,
    "cfg-broken": broken, "cfg-base": baseline, "cfg-solo": baseline,
}


def trace(role: str, config: str, arm: str, i: int, tag: str,
          failing: frozenset[str] = frozenset()) -> dict[str, object]:
    """The trace one run of job `i` reports (every run of a config in `failing` fails)."""
    passed, forbidden_call = BEHAVIOURS[config](i)
    passed = passed and config not in failing
    tools = ["search", "write"] + (["delete_all"] if forbidden_call else [])
    return {"run_id": f"{role}-{tag}-{arm}-{i}", "role": role, "config": config, "arm": arm,
            "key": f"job-{i}", "tools": tools, "artifacts": ["out.md"] if passed else [],
            "stamps": STAMPS}


class Population:
    """Posts `batch` jobs per role every `pause` seconds from a thread until stopped."""

    def __init__(self, url: str, roles: list[str], *, batch: int = 30, pause: float = 0.05,
                 tag: str = "p") -> None:
        self.url = url
        self.roles = roles
        self.batch = batch
        self.pause = pause
        self.tag = tag
        self.jobs = 0
        self.errors: list[str] = []
        #: Configs whose every run fails while they are in it (an outage).
        self.failing: frozenset[str] = frozenset()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, daemon=True)
        self._session = requests.Session()
        self._session.headers.update(auth(CALLER))

    def __enter__(self) -> Population:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._session.close()

    def step(self) -> None:
        """Run one batch of jobs for every role and report their traces."""
        with self._session.get(f"{self.url}/v1/bindings?view=full", timeout=5) as answer:
            answer.raise_for_status()
            roles = answer.json()["roles"]
        traces = []
        failing = self.failing
        versions = {}
        for role in self.roles:
            record = VersionedBinding.model_validate(roles[role])
            versions[role] = record.version
            for _ in range(self.batch):
                i = self.jobs = self.jobs + 1
                where = resolve(role, record.binding, record.version, f"job-{i}")
                traces.append(trace(role, where["config"], where["arm"], i, self.tag, failing))
                if where["shadow"] is not None:
                    traces.append(trace(role, where["shadow"], "shadow", i, self.tag, failing))
        with self._session.post(f"{self.url}/v1/traces", json={"traces": traces},
                                timeout=10) as answer:
            if answer.status_code != 200 and not self._refused_as_moved(answer, traces, versions):
                self.errors.append(answer.text[:500])

    def _refused_as_moved(self, answer: requests.Response, traces: list[dict[str, object]],
                          versions: dict[str, int]) -> bool:
        """Whether each trace not accepted was refused as `config_not_bound` for a role
        whose binding moved after this batch was resolved.

        A run resolved just before a promotion to stable and reported just after
        is on a config the role no longer runs: the router refuses it, rightly,
        and an agent would see the same. Any other refusal is an error.
        """
        try:
            results = answer.json()["results"]
        except (ValueError, KeyError):
            return False
        refused = [r for r in results if r.get("status") != "accepted"]
        if not refused or any(r.get("status") != "refused"
                              or r.get("error", {}).get("code") != NOT_BOUND for r in refused):
            return False
        with self._session.get(f"{self.url}/v1/bindings?view=full", timeout=5) as now:
            now.raise_for_status()
            roles = now.json()["roles"]
        moved = {role for role, version in versions.items() if roles[role]["version"] > version}
        return all(traces[r["index"]]["role"] in moved for r in refused)

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except requests.RequestException as exc:
                self.errors.append(str(exc))
            self._stop.wait(self.pause)
