"""Reports matched to their own assignments: a run is missing only when its own id is.

Issue 34. Every resolve path (HTTP resolve through Flask and its fast path,
OFREP single and bulk, the SDK's in-process resolve) mints a run id, answers it
and counts the assignment under it; a trace reported under that id is matched
as it is stored. The real router, its own Redis, the real SDK and decide() on
the real gate view; the pure arithmetic of `gatekeeper.stats.matching` first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask import Flask

from gatekeeper.machine.decide import Action
from gatekeeper.stats.matching import RunIds, matched_reports
from gatekeeper.stats.missing import missing_of
from gatekeeper.stats.reports import SHORT
from gatekeeper.store.run_matches import RunMatchStore, runs_key
from rolegate import Client
from rolegate.exposures import BUCKET_S, epoch_of
from rolegate.recorder import Recorder
from rolegate.run_ids import is_minted, run_id_of
from router.api.exposures import exposure_counter
from router.app import create_app
from router.cli.status import render
from tests.conftest import OPERATOR, TOKENS, auth
from tests.reporting import STAMPS, decide_now, record, reported_at_once
from tests.servers import wait_for, werkzeug_server

ROLE = "summarizer"
FLEET = "fleet-secret"
MALLORY = "mallory-secret"
CANARY = {"current": "cfg_a", "candidate": "cfg_b", "stage": "canary", "share": 0.5,
          "gate": {"thresholds": {"min_samples": 10, "min_stage_seconds": 0.0,
                                  "bake_seconds": 0.0}, "power": None}}
#: Assignments counted this far back are past the report grace: the gate reads them.
PAST_S = 900.0
CONFIG = {"candidate": "cfg_b", "current": "cfg_a"}


# -- the arithmetic ------------------------------------------------------------------

def test_a_pending_id_is_missing_whatever_other_buckets_reported() -> None:
    """Ids matched run by run: 2 of bucket 4's 10 runs never reported, though 5 runs that
    started in bucket 5 (queued ones, under their own ids) leave bucket 5 a surplus that
    the bucket arithmetic would have let cover them."""
    runs = RunIds({4: 10, 5: 10}, {4: 2}, 0, None)
    got = matched_reports({4: 10, 5: 10}, {4: 3, 5: 15}, {4: 3, 5: 15}, runs, mature=6)
    assert got == {4: 8, 5: 10}
    arithmetic = missing_of(({4: 10, 5: 10}, {4: 3, 5: 15}), ({}, {}), 6)
    assert dict(arithmetic.candidate) == {4: 2}  # 7 short, 5 covered: by luck, not by run
    # Every run reported, 7 of bucket 4's starting two buckets later: nothing missing by
    # id; by buckets, 7 "missing" in bucket 4 (bucket 5 has no surplus to lend).
    later = {4: 3, 5: 10, 6: 7}
    matched = matched_reports({4: 10, 5: 10}, later, later,
                              RunIds({4: 10, 5: 10}, {}, 0, None), mature=7)
    assert matched == {4: 10, 5: 10}
    assert dict(missing_of(({4: 10, 5: 10}, later), ({}, {}), 7).candidate) == {4: 7}


def test_runs_without_ids_keep_the_bucket_arithmetic() -> None:
    """No ids: reported as counted. Ids a caller ignores (its own run ids): plain reports
    cover pending ids by the same arithmetic; an id'd report that matched nothing covers
    nothing."""
    assert matched_reports({4: 10}, {4: 7}, {}, None, mature=6) == {4: 7}
    ignored = RunIds({4: 10, 5: 10}, {4: 10, 5: 10}, 0, None)
    assert matched_reports({4: 10, 5: 10}, {4: 7, 5: 13}, {}, ignored, mature=6) == {
        4: 10, 5: 10}
    # 7 of 10 matched, 3 more reports under minted ids that matched nothing: 3 missing.
    forged = RunIds({4: 10}, {4: 3}, 0, None)
    assert matched_reports({4: 10}, {4: 10}, {4: 10}, forged, mature=6) == {4: 7}


def test_runs_in_flight_make_their_bucket_wait() -> None:
    """Within the grace a pending id is in flight, not missing: its bucket's cell waits."""
    runs = RunIds({7: 10}, {}, 4, 7)
    got = matched_reports({7: 10}, {7: 6}, {7: 6}, runs, mature=6)
    missing = missing_of(({7: 10}, got), ({7: 10}, {7: 10}), 6)
    assert missing.candidate == {} and missing.waiting_from is not None


def test_a_resolution_recorded_twice_gives_the_second_run_its_own_id() -> None:
    """The recorder reports the first run under the resolve's id; a retry recorded from the
    same answer gets a fresh one (else its trace would be a duplicate, never counted)."""
    answer = {"role": ROLE, "config": "cfg_b", "arm": "candidate", "key": "k", "shadow": None,
              "run_stem": "r1.0123456789ab.", "run_seq": 7}
    first, again = Recorder(answer, STAMPS), Recorder(answer, STAMPS)
    assert first.run_id == "r1.0123456789ab.7" and run_id_of(answer) == first.run_id
    assert again.run_id != first.run_id and not is_minted(again.run_id)


# -- on a real router ----------------------------------------------------------------

@pytest.fixture
def app(redis_url: str) -> Iterator[Flask]:
    """The router with the agents' token (`fleet`) and an attacker's (`mallory`)."""
    app = create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05,
                      "tokens": f"{TOKENS},fleet={FLEET}:caller,mallory={MALLORY}:caller"})
    yield app
    app.extensions["rolegate"].cache.stop()
    app.extensions["rolegate"].redis.close()


@pytest.fixture(autouse=True)
def _reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs here are posted PAST_S after they started: taken as reported at once."""
    reported_at_once(monkeypatch)


@pytest.fixture
def router(app: Flask) -> Iterator[str]:
    """summarizer on a 0.5 canary; the exposure thread stopped, so each test flushes."""
    exposure_counter(app).stop()
    with werkzeug_server(app) as url:
        r = requests.put(f"{url}/v1/bindings/{ROLE}", json=CANARY, headers=auth(OPERATOR),
                         timeout=5)
        assert r.status_code == 201, r.text
        yield url


def _resolve(url: str, path: str, n: int, token: str = FLEET) -> tuple[str, str]:
    """(run id, arm) of job `n` resolved through `path`."""
    headers = auth(token)
    if path in ("flask", "fast"):
        key = f"job%20{n}" if path == "flask" else f"job-{n}"  # a key to decode: Flask's
        r = requests.get(f"{url}/v1/resolve/{ROLE}?key={key}", headers=headers, timeout=5)
        assert r.status_code == 200, r.text
        return r.json()["run_id"], r.json()["arm"]
    body = {"context": {"targetingKey": f"job-{n}"}}
    if path.endswith("-flask"):
        # A header the WSGI fast path hands on: the Flask views answer (bodies included).
        headers = {**headers, "X-Rolegate-Include": "body"}
        path = path.removesuffix("-flask")
    if path == "ofrep":
        r = requests.post(f"{url}/ofrep/v1/evaluate/flags/{ROLE}", json=body,
                          headers=headers, timeout=5)
        assert r.status_code == 200, r.text
        flag = r.json()
    else:
        r = requests.post(f"{url}/ofrep/v1/evaluate/flags", json=body, headers=headers,
                          timeout=5)
        assert r.status_code == 200, r.text
        flag, = [f for f in r.json()["flags"] if f["key"] == ROLE]
    return flag["metadata"]["run_id"], flag["variant"]


def _trace(run_id: str, arm: str, started: float, failed: bool = False) -> dict[str, Any]:
    return {"run_id": run_id, "role": ROLE, "arm": arm, "config": CONFIG[arm],
            "key": run_id, "tools": ["read"], "stamps": STAMPS, "time": started + 2.0,
            "latency_s": 2.0, "answered": not failed}


def _post(url: str, traces: list[dict[str, Any]], token: str = FLEET) -> list[dict[str, Any]]:
    r = requests.post(f"{url}/v1/traces", json={"traces": traces}, headers=auth(token),
                      timeout=10)
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


@pytest.mark.parametrize("path", ["flask", "fast", "ofrep", "bulk", "ofrep-flask",
                                  "bulk-flask"])
def test_a_run_reported_under_its_id_is_matched_and_one_never_reported_is_missing(
        app: Flask, router: str, path: str) -> None:
    """80 jobs resolved through `path`, counted 15 minutes back; every current run and
    two in three candidate runs report under their ids, started 5 minutes after their
    resolve (queued: another bucket). Matched run by run: the missing are exactly the
    unreported candidate runs, and `missing_runs: fail` counts them as failed."""
    runs = [_resolve(router, path, n) for n in range(80)]
    assert all(is_minted(run_id) for run_id, _ in runs)
    assert len({run_id for run_id, _ in runs}) == 80
    past = time.time() - PAST_S
    exposure_counter(app).flush(now=past)
    unreported = [run_id for n, (run_id, arm) in enumerate(runs)
                  if arm == "candidate" and n % 3 == 0]
    _post(router, [_trace(run_id, arm, past + 300.0) for run_id, arm in runs
                   if run_id not in unreported])
    view, _ = decide_now(router, ROLE)
    assigned = {arm: sum(1 for _, a in runs if a == arm) for arm in CONFIG}
    figures = view["reports"]["runs"]
    assert figures["candidate"] == {"with_id": assigned["candidate"],
                                    "matched": assigned["candidate"] - len(unreported),
                                    "missing": len(unreported), "in_flight": 0}, figures
    assert figures["current"] == {"with_id": assigned["current"],
                                  "matched": assigned["current"], "missing": 0,
                                  "in_flight": 0}
    assert view["concurrent"]["missing"]["candidate"] == len(unreported)
    assert view["concurrent"]["missing"]["current"] == 0


def test_the_sdk_mints_ids_its_recorder_reports_them_and_the_missing_roll_back(
        app: Flask, router: str) -> None:
    """The real SDK: each in-process resolve answers a run id, its recorder reports under it,
    the exposure sender sends the ids as ranges. Half the candidate's runs never report:
    exactly those are missing, and the gate rolls the candidate back."""
    sdk = Client(router, FLEET, stamps=STAMPS, refresh_interval=0.1)
    try:
        past = time.time() - PAST_S
        sdk._sender.clock = lambda: past  # counted 15 minutes back: past the grace
        answers = [sdk.resolve(ROLE, f"job-{n}") for n in range(200)]
        ids = [run_id_of(a) for a in answers]
        assert all(i is not None and is_minted(i) for i in ids) and len(set(ids)) == 200
        dropped = 0
        for n, answer in enumerate(answers):
            if answer["arm"] == "candidate" and n % 2:
                dropped += 1
                continue
            with sdk.recorder(answer) as run:
                run.output("done")
            assert run.trace is not None and run.trace.run_id == run_id_of(answer)
        assert sdk.flush(10)
    finally:
        sdk.close()
    view, decision = decide_now(router, ROLE)
    figures = view["reports"]["runs"]
    assert figures["candidate"]["missing"] == dropped, figures
    assert figures["current"]["missing"] == 0 and figures["current"]["matched"] > 0
    assert view["concurrent"]["missing"]["candidate"] == dropped
    assert view["reports"]["verdict"] == SHORT
    assert decision.action is Action.ROLLBACK, decision
    # Served: `rolegate status` and the role page say the same figures.
    matched = figures["candidate"]["matched"]
    assert (f"by run id: candidate {matched} of {matched + dropped} matched, {dropped} "
            "missing, 0 in flight") in "\n".join(render(view)), render(view)
    page = requests.get(f"{router}/ui/roles/{ROLE}", headers=auth(FLEET), timeout=10).text
    assert f'<td class="num run-matched">{matched} of {matched + dropped}</td>' in page
    assert f'<td class="num run-missing">{dropped}</td>' in page


def test_a_candidate_reporting_later_than_current_within_the_grace_is_held(
        app: Flask, router: str) -> None:
    """Resolved now; current's runs report at once, the candidate's not yet: in flight, not
    missing, nothing rolled back. When they come (still within the grace) all are matched."""
    runs = [_resolve(router, "fast", n) for n in range(60)]
    exposure_counter(app).flush()
    now = time.time()
    _post(router, [_trace(run_id, arm, now - 2.0) for run_id, arm in runs
                   if arm == "current"])
    view, decision = decide_now(router, ROLE)
    candidate = sum(1 for _, arm in runs if arm == "candidate")
    assert view["reports"]["runs"]["candidate"]["in_flight"] == candidate, view["reports"]
    assert view["reports"]["runs"]["candidate"]["missing"] == 0
    assert view["reports"]["verdict"] != SHORT
    assert view["concurrent"]["missing"]["candidate"] == 0
    assert decision.action is not Action.ROLLBACK, decision
    _post(router, [_trace(run_id, arm, now - 1.0) for run_id, arm in runs
                   if arm == "candidate"])
    view, _ = decide_now(router, ROLE)
    assert view["reports"]["runs"]["candidate"]["in_flight"] == 0, view["reports"]
    assert view["reports"]["runs"]["current"]["in_flight"] == 0


def test_a_report_that_beats_its_exposure_flush_is_matched_and_a_replay_counts_once(
        app: Flask, router: str) -> None:
    """Reported before the worker flushed the assignment: the flush finds the claim and
    never adds the id. The same trace sent again is a duplicate and matches nothing twice."""
    runs = [_resolve(router, "fast", n) for n in range(20)]
    past = time.time() - PAST_S
    traces = [_trace(run_id, arm, past) for run_id, arm in runs]
    _post(router, traces)
    exposure_counter(app).flush(now=past)
    again = _post(router, traces)
    assert all(result["status"] == "duplicate" for result in again), again
    view, _ = decide_now(router, ROLE)
    for arm in CONFIG:
        figures = view["reports"]["runs"][arm]
        assert figures["missing"] == 0 and figures["matched"] == figures["with_id"] > 0


def test_another_tokens_reports_under_our_ids_match_nothing(app: Flask, router: str) -> None:
    """mallory reports passing traces under the fleet's unreported candidate run ids: they
    are mallory's own runs (stored, counted as hers), the fleet's ids stay missing; ids
    mallory posts for an arm she never reports stay hers alone."""
    runs = [_resolve(router, "fast", n) for n in range(60)]
    past = time.time() - PAST_S
    exposure_counter(app).flush(now=past)
    candidate = [(run_id, arm) for run_id, arm in runs if arm == "candidate"]
    _post(router, [_trace(run_id, arm, past) for run_id, arm in runs if arm == "current"])
    forged = _post(router, [_trace(run_id, arm, past) for run_id, arm in candidate],
                   token=MALLORY)
    assert all(result["status"] == "accepted" for result in forged), forged
    epoch = epoch_of(record(router, ROLE).binding.stage_since)
    r = requests.post(f"{router}/v1/exposures", headers=auth(MALLORY), timeout=5, json={
        "exposures": [{"role": ROLE, "config": "cfg_b", "arm": "candidate", "epoch": epoch,
                       "bucket": int(past // BUCKET_S), "count": 50,
                       "ids": {"stem": "r1.0123456789ab.", "from": 0, "to": 50}}]})
    assert r.status_code == 200, r.text
    view, _ = decide_now(router, ROLE)
    reports = view["reports"]
    assert reports["runs"]["candidate"]["missing"] == len(candidate), reports
    assert reports["by_reporter"]["mallory"]["counted"] is False
    assert view["concurrent"]["missing"]["candidate"] == len(candidate)


@pytest.mark.parametrize("ids, says", [
    ({"stem": "r1.0123456789ab.", "from": 0, "to": 4}, "count says 5"),
    ({"stem": "job-", "from": 0, "to": 5}, "stem"),
    ({"stem": "r1.0123456789ab.", "from": 0, "to": 5, "extra": 1}, "extra"),
])
def test_a_bad_id_range_is_a_422_naming_it(router: str, ids: dict[str, Any], says: str) -> None:
    """An id range that does not name `count` runs, a stem that is not minted, an unknown
    field: 422 naming it, nothing added."""
    epoch = epoch_of(record(router, ROLE).binding.stage_since)
    r = requests.post(f"{router}/v1/exposures", headers=auth(FLEET), timeout=5, json={
        "exposures": [{"role": ROLE, "config": "cfg_b", "arm": "candidate", "epoch": epoch,
                       "bucket": 1, "count": 5, "ids": ids}]})
    assert r.status_code == 422 and says in r.text, r.text


def test_ids_reach_the_router_from_a_live_sdk_sender(app: Flask, router: str) -> None:
    """Without a test clock: the SDK's sender thread delivers its ranges within seconds,
    each run in flight until its report matches it."""
    sdk = Client(router, FLEET, stamps=STAMPS, refresh_interval=0.1)
    try:
        answers = [sdk.resolve(ROLE, f"live-{n}") for n in range(30)]
        wait_for(lambda: sum(decide_now(router, ROLE)[0]["reports"]["runs"][arm]["in_flight"]
                               for arm in CONFIG) == 30, 10, "the SDK's ids to arrive")
        for answer in answers:
            with sdk.recorder(answer) as run:
                run.output("done")
        assert sdk.flush(10)
    finally:
        sdk.close()
    runs = decide_now(router, ROLE)[0]["reports"]["runs"]
    assert runs["candidate"]["in_flight"] == runs["current"]["in_flight"] == 0, runs


def test_run_ids_count_against_the_tokens_ingest_quota(redis_url: str) -> None:
    """Ids are Redis work: ten ids count as one trace of the token's quota. Over it: 429
    with Retry-After, and neither the counts nor the ids are written."""
    app = create_app({"redis_url": redis_url, "testing": True, "refresh_interval_s": 0.05,
                      "tokens": f"{TOKENS},fleet={FLEET}:caller", "ingest_quota": "traces=5"})
    exposure_counter(app).stop()
    try:
        with werkzeug_server(app) as url:
            r = requests.put(f"{url}/v1/bindings/{ROLE}", json=CANARY, headers=auth(OPERATOR),
                             timeout=5)
            assert r.status_code == 201, r.text
            epoch = epoch_of(record(url, ROLE).binding.stage_since)
            row = {"role": ROLE, "config": "cfg_b", "arm": "candidate", "epoch": epoch,
                   "bucket": int(time.time() // BUCKET_S), "count": 100,
                   "ids": {"stem": "r1.0123456789ab.", "from": 0, "to": 100}}
            over = requests.post(f"{url}/v1/exposures", json={"exposures": [row]},
                                 headers=auth(FLEET), timeout=5)
            assert over.status_code == 429 and over.headers["Retry-After"], over.text
            view, _ = decide_now(url, ROLE)
            assert view["reports"]["assigned"]["candidate"] == 0
            assert view["reports"]["runs"]["candidate"]["in_flight"] == 0
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()


def test_ids_pending_long_past_the_grace_are_settled_into_counts(app: Flask,
                                                                 router: str) -> None:
    """An id still pending ten graces and 10 minutes after its assignment leaves the sorted
    set for a per-bucket count when the next ids arrive: still missing, holding no memory per run; a report that
    comes after that matches nothing."""
    epoch = epoch_of(record(router, ROLE).binding.stage_since)
    old = int((time.time() - 2400) // BUCKET_S)
    stem = "r1.00000000000a."
    for bucket, start in ((old, 0), (int(time.time() // BUCKET_S), 10)):
        r = requests.post(f"{router}/v1/exposures", headers=auth(FLEET), timeout=5, json={
            "exposures": [{"role": ROLE, "config": "cfg_b", "arm": "candidate", "epoch": epoch,
                           "bucket": bucket, "count": 10,
                           "ids": {"stem": stem, "from": start, "to": start + 10}}]})
        assert r.status_code == 200, r.text
    _post(router, [_trace(f"{stem}3", "candidate", old * BUCKET_S + 1.0)])
    store = RunMatchStore(app.extensions["rolegate"].redis, 60)
    key = runs_key(ROLE, "cfg_b", "candidate", epoch, "fleet")
    assert app.extensions["rolegate"].redis.zcard(key) == 10  # the new ten only
    runs = store.read(ROLE, "cfg_b", "candidate", epoch, ["fleet"], time.time() - 150)
    assert runs["fleet"].missing == {old: 10} and runs["fleet"].in_flight == 10


@pytest.mark.cluster
def test_runs_are_matched_on_a_redis_cluster(cluster_url: str) -> None:
    """On a three-master cluster: the worker's flush adds the ids (EVALSHA routed by the
    role's slot), ingest matches them, the view reads what is missing."""
    app = create_app({"redis_url": cluster_url, "testing": True, "refresh_interval_s": 0.05,
                      "tokens": f"{TOKENS},fleet={FLEET}:caller"})
    exposure_counter(app).stop()
    client = app.test_client()
    try:
        assert client.put(f"/v1/bindings/{ROLE}", json=CANARY,
                          headers=auth(OPERATOR)).status_code == 201
        wait_for(lambda: client.get(f"/v1/resolve/{ROLE}?key=k",
                                    headers=auth(FLEET)).json.get("stage") == "canary",
                 10, "the worker to serve the canary")
        exposure_counter(app).drain(0.0)  # the waiting resolves: counted nowhere
        answers = [client.get(f"/v1/resolve/{ROLE}?key=c-{n}", headers=auth(FLEET)).json
                   for n in range(40)]
        past = time.time() - PAST_S
        exposure_counter(app).flush(now=past)
        kept = [a for n, a in enumerate(answers) if a["arm"] == "current" or n % 2]
        r = client.post("/v1/traces", headers=auth(FLEET), json={"traces": [
            _trace(a["run_id"], a["arm"], past) for a in kept]})
        assert r.status_code == 200, r.json
        view = client.get(f"/v1/roles/{ROLE}/gate", headers=auth(OPERATOR)).json
        dropped = len(answers) - len(kept)
        assert view["reports"]["runs"]["candidate"]["missing"] == dropped, view["reports"]
        assert view["reports"]["runs"]["current"]["missing"] == 0
    finally:
        app.extensions["rolegate"].cache.stop()
        app.extensions["rolegate"].redis.close()
