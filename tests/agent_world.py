"""The agents' world, on a real router: keys that repeat, runs that take time, late reports.

A `World` drives several roles at once from one thread, in real time. Each
role's jobs arrive at `rate` per second; a job's key is unique, or one of
`customers` keys with Zipf volumes and a difficulty of their own (so runs of
one key are correlated). The job is resolved (rolegate.routing.resolve, the
SDK's code, on the binding as the router serves it) the moment it arrives: the
run is born at its assignment. It runs for its arm's duration, reports its
arm's delay later (POST /v1/traces, `time` = when it ended, `latency_s` = how
long it ran), and a failed run is retried under the same key up to
`retries` times. During an `outage` every run that *starts* in it fails, on
both arms. Outcomes are drawn from a seeded generator.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import requests

from bindings.models import Binding
from rolegate.routing import resolve
from tests.conftest import CALLER, OPERATOR, auth

STAMPS = {"agent_version": "a1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}
#: What every world role's runs must leave behind: a run without it failed.
INVARIANTS = {"artifact_exists": ["out.md"]}


@dataclass(frozen=True)
class Behaviour:
    """How one arm's runs go: pass rate (of an average key), duration, report delay, latency."""

    pass_rate: float = 0.95
    duration_s: float = 1.0
    report_delay_s: float = 0.2
    #: The latency_s a run reports (None: its duration).
    latency_s: float | None = None
    cost_usd: float = 0.01
    #: The tools a run calls, and the job input it reports (a spec's criteria read them).
    tools: tuple[str, ...] = ("search",)
    input: dict[str, Any] | None = None


@dataclass
class Scenario:
    """One role of the world: its traffic, its keys and each arm's behaviour."""

    role: str
    current: Behaviour = field(default_factory=Behaviour)
    candidate: Behaviour = field(default_factory=Behaviour)
    share: float = 0.5
    rate: float = 10.0
    #: None: every job has its own key; else this many customers with Zipf volumes.
    customers: int | None = None
    zipf: float = 1.1
    #: Spread of the customers' difficulty on the logit scale (0.8: ICC about 0.1-0.2).
    difficulty_sd: float = 0.0
    retries: int = 0
    #: (start, end) in seconds from the world's start: runs starting then fail.
    outage: tuple[float, float] | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    #: A hard tenant: this fraction of jobs carry tenant=hard and pass at `hard_pass`
    #: on both arms; with `hard_rule` a targeting rule sends them all to the candidate.
    hard_fraction: float = 0.0
    hard_pass: float = 0.65
    hard_rule: bool = False

    def faster(self, speed: float) -> Scenario:
        """The same role with time running `speed` times as fast: every span (the outage,
        each arm's run durations, report delays and latencies) divided by `speed`, the rate
        multiplied by it, so each span of the world holds as many runs as before."""
        def quicker(arm: Behaviour) -> Behaviour:
            return replace(arm, duration_s=arm.duration_s / speed,
                           report_delay_s=arm.report_delay_s / speed,
                           latency_s=None if arm.latency_s is None else arm.latency_s / speed)
        outage = None if self.outage is None else (self.outage[0] / speed,
                                                   self.outage[1] / speed)
        return replace(self, current=quicker(self.current), candidate=quicker(self.candidate),
                       rate=self.rate * speed, outage=outage)


def put_world_role(url: str, scenario: Scenario) -> None:
    """Create the scenario's role on a canary at its share, with the shipped gate policy."""
    gate = {"invariants": INVARIANTS, **scenario.policy}
    body: dict[str, Any] = {"current": "cfg-a", "candidate": "cfg-b", "stage": "canary",
                            "share": scenario.share, "steps": [scenario.share, 1.0],
                            "gate": gate}
    if scenario.hard_rule:
        body["rules"] = [{"when": {"tenant": ["hard"]}, "arm": "candidate", "name": "hard"}]
    r = requests.put(f"{url}/v1/bindings/{scenario.role}", json=body, headers=auth(OPERATOR),
                     timeout=10)
    assert r.status_code in (200, 201), r.text


class World:
    """Runs the scenarios against the router at `url` from a thread until stopped."""

    def __init__(self, url: str, scenarios: list[Scenario], seed: int = 1,
                 report_every: float = 0.0) -> None:
        self.url = url
        #: Reports due are sent together at most this often (seconds): fewer, larger POSTs.
        self.report_every = report_every
        self._reported_at = 0.0
        self.scenarios = {s.role: s for s in scenarios}
        self.random = random.Random(seed)
        self.start = time.time()
        self.runs: dict[str, dict[str, int]] = {s.role: {"candidate": 0, "current": 0}
                                                for s in scenarios}
        #: When each role's candidate ran first (wall clock).
        self.first_candidate: dict[str, float] = {}
        #: When each candidate run started, per role (the runs a rollback came after).
        self.candidate_starts: dict[str, list[float]] = {}
        #: When each current run started, per role.
        self.current_starts: dict[str, list[float]] = {}
        self.errors: list[str] = []
        self._bindings: dict[str, tuple[Binding, int]] = {}
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._due: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, daemon=True)
        self._session = requests.Session()
        self._session.headers.update(auth(CALLER))
        self._difficulty: dict[str, list[float]] = {}
        self._weights: dict[str, list[float]] = {}
        for s in scenarios:
            if s.customers:
                self._weights[s.role] = list(itertools.accumulate(
                    1.0 / (k + 1) ** s.zipf for k in range(s.customers)))
                self._difficulty[s.role] = [self.random.gauss(0.0, s.difficulty_sd)
                                            for _ in range(s.customers)]

    def __enter__(self) -> World:
        for role in self.scenarios:
            self._refresh(role)
            self._at(self.start + self.random.expovariate(self.scenarios[role].rate),
                     lambda role=role: self._arrive(role))  # type: ignore[misc]
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._session.close()

    def stop_role(self, role: str) -> None:
        """Send no more jobs for `role` (its outcome is known)."""
        self.scenarios.pop(role, None)

    def _refresh(self, role: str) -> None:
        r = self._session.get(f"{self.url}/v1/bindings/{role}", timeout=10)
        r.raise_for_status()
        body = r.json()
        self._bindings[role] = (Binding.model_validate(body["binding"]), int(body["version"]))

    def _at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (when, next(self._order), action))

    def _key(self, scenario: Scenario) -> tuple[str, float]:
        if not scenario.customers:
            return f"job-{next(self._order)}", 0.0
        weights = self._weights[scenario.role]
        index = min(len(weights) - 1, _bisect(weights, self.random.random() * weights[-1]))
        return f"customer-{index}", self._difficulty[scenario.role][index]

    def _arrive(self, role: str) -> None:
        scenario = self.scenarios.get(role)
        if scenario is None:
            return
        key, difficulty = self._key(scenario)
        self._run(scenario, key, difficulty, attempt=0)
        self._at(time.time() + self.random.expovariate(scenario.rate),
                 lambda: self._arrive(role))

    def _run(self, scenario: Scenario, key: str, difficulty: float, attempt: int) -> None:
        binding, version = self._bindings[scenario.role]
        hard = scenario.hard_fraction > 0 and self.random.random() < scenario.hard_fraction
        attributes = {"tenant": "hard" if hard else "easy"} if scenario.hard_fraction else None
        answer = resolve(scenario.role, binding, version, key, attributes=attributes)
        arm = answer["arm"]
        behaviour = scenario.candidate if arm == "candidate" else scenario.current
        if hard:
            behaviour = replace(behaviour, pass_rate=scenario.hard_pass)
        start = time.time()
        if arm == "candidate":
            self.first_candidate.setdefault(scenario.role, start)
            self.candidate_starts.setdefault(scenario.role, []).append(start)
        else:
            self.current_starts.setdefault(scenario.role, []).append(start)
        self.runs[scenario.role][arm] += 1
        logit = math.log(behaviour.pass_rate / (1.0 - behaviour.pass_rate)) - difficulty
        passed = self.random.random() < 1.0 / (1.0 + math.exp(-logit))
        if scenario.outage is not None:
            began, ended = scenario.outage
            passed = passed and not began <= start - self.start < ended
        duration = behaviour.duration_s * self.random.uniform(0.5, 1.5)
        trace = {"run_id": f"{scenario.role}-{next(self._order)}", "role": scenario.role,
                 "config": answer["config"], "arm": arm, "key": key,
                 "tools": list(behaviour.tools), **({"input": behaviour.input}
                                                    if behaviour.input is not None else {}),
                 "artifacts": ["out.md"] if passed else [], "stamps": STAMPS,
                 "time": start + duration,
                 "latency_s": duration if behaviour.latency_s is None
                 else behaviour.latency_s * self.random.uniform(0.5, 1.5),
                 "cost_usd": behaviour.cost_usd,
                 **({"attributes": attributes} if attributes else {}),
                 **({"rule": answer["rule"]} if answer.get("rule") else {})}
        self._at(start + duration + behaviour.report_delay_s, lambda: self._due.append(trace))
        if not passed and attempt < scenario.retries:
            self._at(start + duration + 0.1,
                     lambda: self._run(scenario, key, difficulty, attempt + 1)
                     if scenario.role in self.scenarios else None)

    def _work(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            while self._queue and self._queue[0][0] <= now:
                _, _, action = heapq.heappop(self._queue)
                try:
                    action()
                except requests.RequestException as exc:
                    self.errors.append(repr(exc))
            if now - self._reported_at < self.report_every:
                due = []
            else:
                due, self._due = self._due, []
                self._reported_at = now
            for chunk in range(0, len(due), 100):
                try:
                    r = self._session.post(f"{self.url}/v1/traces", json=due[chunk:chunk + 100],
                                           timeout=30)
                    if r.status_code >= 500:
                        self.errors.append(r.text[:300])
                except requests.RequestException as exc:
                    self.errors.append(repr(exc))
            wait = (self._queue[0][0] - time.time()) if self._queue else 0.02
            self._stop.wait(min(0.02, max(0.0, wait)))


def _bisect(cumulative: list[float], value: float) -> int:
    low, high = 0, len(cumulative)
    while low < high:
        middle = (low + high) // 2
        if cumulative[middle] < value:
            low = middle + 1
        else:
            high = middle
    return low
