"""OFREP evaluations are assignments: counted as exposures exactly as GET /v1/resolve counts them.

Issue 33: 300 OpenFeature evaluations counted 0 exposures, so a candidate
resolved through OFREP whose runs never reported was promoted. Here the real
OpenFeature SDK and OFREP provider (and plain bulk POSTs) evaluate through the
real router, the worker's counters go to Redis, and decide() reads the real
gate view.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask import Flask
from openfeature import api
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext

from gatekeeper.machine.decide import Action
from gatekeeper.stats.reports import SHORT
from gatekeeper.store.exposures import ExposureStore
from router.api.exposures import exposure_counter
from tests.conftest import CALLER, OPERATOR, auth
from tests.reporting import STAMPS, decide_now, record, reported_at_once
from tests.servers import werkzeug_server

SINGLE = "/ofrep/v1/evaluate/flags/{role}"
BULK = "/ofrep/v1/evaluate/flags"
CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5,
          "gate": {"thresholds": {"min_samples": 10, "min_stage_seconds": 0.0,
                                  "bake_seconds": 0.0},
                   "power": None}}
#: Counts drained into a bucket this far back are past the report grace: the gate reads them.
PAST_S = 900.0


@pytest.fixture(autouse=True)
def _reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs here are posted PAST_S after they started: taken as reported at once."""
    reported_at_once(monkeypatch)


@pytest.fixture
def router(app: Flask) -> Iterator[str]:
    """The router over real HTTP; its exposure thread stopped, so each test flushes itself."""
    exposure_counter(app).stop()
    with werkzeug_server(app) as url:
        yield url


def _put(url: str, role: str, **binding: Any) -> None:
    r = requests.put(f"{url}/v1/bindings/{role}", json=binding, headers=auth(OPERATOR),
                     timeout=5)
    assert r.status_code == 201, r.text


def _exposed(app: Flask, url: str, role: str) -> dict[str, int]:
    """Per arm, the exposures Redis holds for `role`'s current stage."""
    binding = record(url, role).binding
    epoch = f"{binding.stage_since:.6f}"
    store = ExposureStore(app.extensions["rolegate"].redis)
    return {arm: sum(store.buckets(role, config, arm, epoch).values())
            for arm, config in (("current", binding.current), ("candidate", binding.candidate))}


def _of_client(url: str) -> Any:
    api.set_provider(OFREPProvider(url, headers_factory=lambda: auth(CALLER)),
                     domain="ofrep-exposures")
    return api.get_client(domain="ofrep-exposures")


def test_300_single_evaluations_are_300_exposures(app: Flask, router: str) -> None:
    """300 evaluations through the OpenFeature SDK add 300 exposures, each to its own arm."""
    _put(router, "summarizer", **CANARY)
    before = _exposed(app, router, "summarizer")
    client = _of_client(router)
    try:
        arms = Counter(client.get_string_details(
            "summarizer", "fallback", EvaluationContext(targeting_key=f"job-{n}")).variant
            for n in range(300))
    finally:
        api.clear_providers()
    assert set(arms) == {"current", "candidate"}
    exposure_counter(app).flush()
    after = _exposed(app, router, "summarizer")
    assert {arm: after[arm] - before[arm] for arm in after} == dict(arms)
    assert sum(after.values()) - sum(before.values()) == 300


def test_bulk_evaluations_count_each_role_and_a_304_counts_nothing(
        app: Flask, router: str) -> None:
    """150 bulk answers over two live roles add 300 exposures; an unchanged poll (304) adds 0."""
    for role in ("summarizer", "planner"):
        _put(router, role, **CANARY)
    _put(router, "stable", current="cfg_a")  # no rollout: nothing to compare, not counted
    arms: Counter[tuple[str, str]] = Counter()
    tag = ""
    for n in range(150):
        r = requests.post(router + BULK, json={"context": {"targetingKey": f"job-{n}"}},
                          headers=auth(CALLER), timeout=5)
        assert r.status_code == 200, r.text
        arms.update((flag["key"], flag["variant"]) for flag in r.json()["flags"]
                    if flag["key"] != "stable")
        tag = r.headers["ETag"]
    again = requests.post(router + BULK, json={"context": {"targetingKey": "job-149"}},
                          headers={**auth(CALLER), "If-None-Match": tag}, timeout=5)
    assert again.status_code == 304
    exposure_counter(app).flush()
    for role in ("summarizer", "planner"):
        assert _exposed(app, router, role) == {arm: arms[(role, arm)]
                                               for arm in ("current", "candidate")}
    assert sum(arms.values()) == 300


def test_a_candidate_resolved_through_ofrep_that_never_reports_is_not_promoted(
        app: Flask, router: str) -> None:
    """Two in three candidate runs never report: decide() rolls back, where uncounted it advanced.

    `summarizer`'s jobs are evaluated through OFREP; `uncounted` gets the same
    runs reported with no evaluation counted (what OFREP did before): the
    report-rate test cannot see its missing runs, and the gate advances it.
    """
    for role in ("summarizer", "uncounted"):
        _put(router, role, **CANARY)
    arms: dict[str, str] = {}
    for n in range(300):
        r = requests.post(router + SINGLE.format(role="summarizer"),
                          json={"context": {"targetingKey": f"job-{n}"}},
                          headers=auth(CALLER), timeout=5)
        assert r.status_code == 200, r.text
        arms[f"job-{n}"] = r.json()["variant"]
    past = time.time() - PAST_S
    exposure_counter(app).flush(now=past)
    for role in ("summarizer", "uncounted"):
        _report(router, role, arms, past)
    view, decision = decide_now(router, "summarizer")
    assert view["reports"]["verdict"] == SHORT, view["reports"]
    assert view["reports"]["assigned"] == dict(Counter(arms.values())), view["reports"]
    assert decision.action is Action.ROLLBACK, decision
    _view, uncounted = decide_now(router, "uncounted")
    assert uncounted.action is Action.ADVANCE, uncounted


def _report(url: str, role: str, arms: dict[str, str], when: float) -> None:
    """Every current run reports a pass; of the candidate's, one in three does."""
    traces = []
    for n, (key, arm) in enumerate(arms.items()):
        if arm == "candidate" and n % 3:
            continue
        config = "cfg_b" if arm == "candidate" else "cfg_a"
        traces.append({"run_id": f"{role}-{key}", "role": role, "arm": arm, "config": config,
                       "key": key, "tools": ["read"], "stamps": STAMPS, "time": when + 2.0,
                       "latency_s": 2.0})  # started at `when`: the exposures' bucket
    r = requests.post(f"{url}/v1/traces", json={"traces": traces}, headers=auth(CALLER),
                      timeout=10)
    assert r.status_code == 200, r.text
