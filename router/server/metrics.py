"""Prometheus metrics at /metrics, correct under several gunicorn workers.

Counters live in this module and are bumped from request hooks, so the API
modules stay unaware of them. Under gunicorn each worker is its own process:
set `PROMETHEUS_MULTIPROC_DIR` (before the app is imported) and prometheus-client
keeps every worker's counters in files there, which a scrape of any worker sums.
The gunicorn config must call `mark_worker_dead` from its `child_exit` hook and
`clear_multiproc_dir` from `on_starting`.

Stage, share and staleness are not counted but read at scrape time from the
scraping worker's binding copy: every worker holds the same table, so any one
of them answers for all.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bindings.errors import RolegateError
from bindings.models import Stage
from gatekeeper.store.heartbeat import HeartbeatStore
from router.server.data_dir import LOCK_FILE
from router.server.services import services_of

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

bp = Blueprint("metrics", __name__)

#: Our own registry: the default one would also collect in every test's app twice.
REGISTRY = CollectorRegistry(auto_describe=True)

RESOLVES = Counter("rolegate_resolves", "Resolves served, by role and arm.",
                   ["role", "arm"], registry=REGISTRY)
STALE_RESOLVES = Counter("rolegate_stale_resolves",
                         "Resolves served from a binding copy Redis could not refresh.",
                         ["role"], registry=REGISTRY)
TRACES = Counter("rolegate_traces_ingested", "Traces accepted, by role and arm.",
                 ["role", "arm"], registry=REGISTRY)
VERDICTS = Counter("rolegate_verdicts",
                   "Verdicts given, by role, source (gate view or offline suite) and verdict.",
                   ["role", "source", "verdict"], registry=REGISTRY)
ROLLBACKS = Counter("rolegate_rollbacks",
                    "Rollbacks, by role and by who did it: human, gatekeeper or tripwire.",
                    ["role", "actor"], registry=REGISTRY)
REDIS_ERRORS = Counter("rolegate_redis_errors",
                       "Times Redis did not answer: in a request, or refreshing the bindings.",
                       ["where"], registry=REGISTRY)
REDIS_REFUSALS = Counter("rolegate_redis_refusals",
                         "Requests answered 503 because Redis refused (OOM, READONLY, "
                         "NOREPLICAS, BUSY, ...), by condition.",
                         ["condition"], registry=REGISTRY)
CLASHES = Counter("rolegate_run_id_clashes",
                  "Traces stored under a run id another reporter had sent first, by role and "
                  "reporter (someone may be reporting under another's run ids).",
                  ["role", "reporter"], registry=REGISTRY)
JUDGE_RUNS = Counter("rolegate_judge_runs",
                     "Runs offered to a role's online judge, by role and outcome: queued, "
                     "skipped_full, skipped_budget (at ingest), judged, error (reported back).",
                     ["role", "outcome"], registry=REGISTRY)
REQUESTS = Counter("rolegate_http_requests", "HTTP requests answered, by status class.",
                   ["status"], registry=REGISTRY)

ROLLBACK_ACTORS = ("human", "gatekeeper", "tripwire")

# The resolve hot path pays a dict lookup, not a labels() call, per request.
_resolve_children: dict[tuple[str, str], Any] = {}
_ingest_children: dict[tuple[str, str], Any] = {}


def count_resolve(role: str, arm: str, stale: bool) -> None:
    """Count one resolve of `role` to `arm` (and a stale one when the copy was stale)."""
    child = _resolve_children.get((role, arm))
    if child is None:
        child = _resolve_children.setdefault((role, arm), RESOLVES.labels(role, arm))
    child.inc()
    if stale:
        STALE_RESOLVES.labels(role).inc()


def count_ingest(role: str, arm: str, new: int) -> None:
    """Count one answered single-trace POST (2xx) and its trace when it was `new` (not a retry).

    For the ingest fast path (router.api.ingest_fast), as `_observe` counts the
    Flask view's; like the resolve path it pays a dict lookup, not labels().
    """
    child = _ingest_children.get((role, arm))
    if child is None:
        child = _ingest_children.setdefault((role, arm), TRACES.labels(role, arm))
    ok = _ingest_children.get(("", "2xx"))
    if ok is None:
        ok = _ingest_children.setdefault(("", "2xx"), REQUESTS.labels("2xx"))
    ok.inc()
    if new:
        child.inc(new)


def count_request(status: int) -> None:
    """Count one answered request by status class, as `_observe` does (for the fast paths)."""
    label = f"{status // 100}xx"
    child = _ingest_children.get(("", label))
    if child is None:
        child = _ingest_children.setdefault(("", label), REQUESTS.labels(label))
    child.inc()


def count_traces(role: str, arm: str, n: int = 1) -> None:
    """Count `n` traces of `role` accepted for `arm`."""
    TRACES.labels(role, arm).inc(n)


def count_clash(role: str, reporter: str) -> None:
    """Count one trace `reporter` sent under a run id of `role` another reporter had claimed."""
    CLASHES.labels(role, reporter).inc()


def count_judge(role: str, outcome: str, n: int = 1) -> None:
    """Count `n` runs of `role` offered to or judged by its online judge, by `outcome`."""
    JUDGE_RUNS.labels(role, outcome).inc(n)


def count_verdict(role: str, source: str, verdict: str) -> None:
    """Count one verdict (pass, fail, pending, ...) of `role` from `source` (gate, offline)."""
    VERDICTS.labels(role, source, verdict).inc()


def count_rollback(role: str, actor: str) -> None:
    """Count one rollback of `role` by `actor`, one of ROLLBACK_ACTORS."""
    if actor not in ROLLBACK_ACTORS:
        raise ValueError(f"actor must be one of {ROLLBACK_ACTORS}, got {actor!r}")
    ROLLBACKS.labels(role, actor).inc()


def count_redis_error(where: str) -> None:
    """Count one time Redis did not answer, `where` naming the caller."""
    REDIS_ERRORS.labels(where).inc()


def rollback_actor(scope: str | None, details: dict[str, Any] | None) -> str:
    """Classify who rolled back: a tripwire names itself in the details, else by token scope."""
    if details and (details.get("tripwire") or details.get("trigger") == "tripwire"):
        return "tripwire"
    return "gatekeeper" if scope == "gatekeeper" else "human"


def _observe(response: Response) -> Response:
    resolution = g.get("resolution")
    if resolution is not None:
        count_resolve(resolution["role"], resolution["arm"], resolution["stale"])
        return response
    status = response.status_code
    REQUESTS.labels(f"{status // 100}xx").inc()
    if status in (503, 504):
        error = g.get("error") or (response.get_json(silent=True) or {}).get("error") or {}
        code = error.get("code")
        if code in ("store_unavailable", "outcome_unknown"):
            count_redis_error("request")
        condition = (error.get("details") or {}).get("condition")
        if code == "store_unavailable" and condition is not None:
            REDIS_REFUSALS.labels(str(condition)).inc()
    elif 200 <= status < 300:
        observer = _OBSERVERS.get(request.endpoint or "")
        if observer is not None:
            observer(response)
    return response


def _rollback(response: Response) -> None:
    record = response.get_json(silent=True) or {}
    body = request.get_json(silent=True)
    details = body.get("details") if isinstance(body, dict) else None
    principal = g.get("principal")
    scope = principal.scope if principal is not None else None
    count_rollback(str(record.get("role")), rollback_actor(scope, details))


def _ingest(response: Response) -> None:
    # api_traces leaves its tripwire list on g, so a batch answer is not parsed again.
    trips = g.get("tripwire")
    if trips is None:
        trips = (response.get_json(silent=True) or {}).get("tripwire") or ()
    _count_stored(g.get("ingested", ()), trips)


def count_batch(status: int, ingested: Iterable[tuple[str, str]],
                trips: Iterable[dict[str, Any]]) -> None:
    """Count an answered trace batch as `_observe` counts the view's (for the ingest fast path)."""
    count_request(status)
    _count_stored(ingested, trips)


def _count_stored(ingested: Iterable[tuple[str, str]], trips: Iterable[dict[str, Any]]) -> None:
    # One inc per (role, arm), not per trace: a batch carries hundreds.
    for (role, arm), n in Tally(ingested).items():
        count_traces(role, arm, n)
    for trip in trips:
        count_rollback(str(trip.get("role")), "tripwire")


def _gate(response: Response) -> None:
    view = response.get_json(silent=True) or {}
    judged = {"shadow": "shadow", "canary": "candidate", "full": "candidate"}.get(
        view.get("stage", ""), "current")
    verdict = (view.get("arms") or {}).get(judged, {}).get("verdict")
    if verdict is not None:
        count_verdict(str(view.get("role")), "gate", str(verdict))


def _offline(response: Response) -> None:
    stored = response.get_json(silent=True) or {}
    passed = (stored.get("verdict") or {}).get("passed")
    if passed is not None:
        count_verdict(str(stored.get("role")), "offline", "pass" if passed else "fail")


#: Endpoints whose successful answers feed a counter.
_OBSERVERS = {
    "bindings.rollback": _rollback,
    "traces.ingest": _ingest,
    "gate.gate": _gate,
    "offline.post_verdict": _offline,
}


bp.after_app_request(_observe)


class BindingCollector(Collector):
    """Stage, share and pause of every role, read from the binding copy at scrape time."""

    def __init__(self, app: Flask) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        """Yield the gauges for every role in the scraping worker's copy."""
        cache = services_of(self.app).cache
        bindings, stale = cache.all()
        stage = GaugeMetricFamily("rolegate_stage", "1 for the stage each role is in.",
                                  labels=["role", "stage"])
        share = GaugeMetricFamily("rolegate_share", "The candidate's share of traffic.",
                                  labels=["role"])
        paused = GaugeMetricFamily("rolegate_paused", "1 when the role's rollout is paused.",
                                   labels=["role"])
        version = GaugeMetricFamily("rolegate_binding_version", "The binding's version.",
                                    labels=["role"])
        for role, record in sorted(bindings.items()):
            binding = record.binding
            for each in Stage:
                stage.add_metric([role, each.value], 1.0 if binding.stage is each else 0.0)
            share.add_metric([role], binding.share)
            paused.add_metric([role], 1.0 if binding.paused else 0.0)
            version.add_metric([role], float(record.version))
        yield stage
        yield share
        yield paused
        yield version
        yield GaugeMetricFamily("rolegate_bindings_stale",
                                "1 while this worker serves a copy Redis could not refresh.",
                                value=1.0 if stale else 0.0)
        yield GaugeMetricFamily("rolegate_bindings_lost_roles",
                                "Roles Redis lost (redis_data_lost) that this worker serves "
                                "from its held copy; restore them with `rolegate bindings "
                                "restore-snapshot`.", value=float(len(cache.lost)))
        yield GaugeMetricFamily("rolegate_bindings_generation",
                                "The change counter of the binding copy.",
                                value=float(cache.generation))


class WatchCollector(Collector):
    """How many watches the scraping worker holds open now: an operator sees the long-polls
    a worker carries, and a test knows its watches arrived without sleeping."""

    def __init__(self, app: Flask) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        """Yield the scraping worker's count of waiting watches."""
        # Imported here: router.api.watch imports the server's modules, not the reverse.
        from router.api.watch import notifier

        yield GaugeMetricFamily("rolegate_watches_waiting",
                                "Watches (GET /v1/bindings/watch) this worker holds open now.",
                                value=float(notifier(self.app).waiting))


class GatekeeperCollector(Collector):
    """The gatekeepers' last leading tick, read from Redis at scrape time.

    `time() - rolegate_gatekeeper_last_tick_timestamp_seconds` is what an alert rule
    pages on (docs/operations.md): it grows while nobody promotes or rolls back.
    """

    def __init__(self, app: Flask) -> None:
        self.store = HeartbeatStore(services_of(app).redis)

    def collect(self) -> Iterator[Metric]:
        """Yield the heartbeat gauges; nothing when Redis cannot be read."""
        try:
            summary = self.store.summary()
        except RolegateError:
            return
        if summary["last_tick"] is not None:
            yield GaugeMetricFamily("rolegate_gatekeeper_last_tick_timestamp_seconds",
                                    "Unix time (Redis's clock) of the leading gatekeeper's "
                                    "last tick.", value=float(summary["last_tick"]))
            yield GaugeMetricFamily("rolegate_gatekeeper_roles_judged",
                                    "Roles the leading gatekeeper judged on its last tick.",
                                    value=float(summary["roles_judged"] or 0))
            yield GaugeMetricFamily("rolegate_gatekeeper_tick_errors",
                                    "Errors the leading gatekeeper met on its last tick.",
                                    value=float(len(summary["errors"])))
        yield GaugeMetricFamily("rolegate_gatekeeper_up",
                                "1 while a leading gatekeeper ticked within a few of its "
                                "intervals.", value=1.0 if summary["status"] == "ok" else 0.0)


class _Forward(Collector):
    """Hands one registry's metrics to another (single-process mode)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        """Yield every metric of the source registry."""
        yield from self.source.collect()


def scrape_registry(app: Flask) -> CollectorRegistry:
    """The registry one scrape reads: every worker's counters, and this app's gauges."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_Forward(REGISTRY))
    registry.register(BindingCollector(app))
    registry.register(GatekeeperCollector(app))
    registry.register(WatchCollector(app))
    if services_of(app).settings.export_otlp_endpoint:
        # Imported here: only routers that export read the exporter's state.
        from router.server.export_metrics import ExportCollector

        registry.register(ExportCollector(app))
    return registry


@bp.get("/metrics")
def metrics() -> Response:
    """The Prometheus text exposition of rolegate's metrics."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    body = generate_latest(scrape_registry(app))
    return Response(body, content_type=CONTENT_TYPE_LATEST)


def mark_worker_dead(pid: int) -> None:
    """Tell prometheus-client a worker exited (gunicorn's `child_exit` hook calls this)."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def clear_multiproc_dir() -> None:
    """Empty the multiprocess directory before the workers start (gunicorn's `on_starting`).

    Files left by a previous run would otherwise be summed into this run's counters.
    """
    path = os.environ.get(MULTIPROC_ENV)
    if not path:
        return
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name == LOCK_FILE:
            continue  # the lock this router holds on the directory (router.server.data_dir)
        target = os.path.join(path, name)
        if os.path.isdir(target):
            shutil.rmtree(target)
        else:
            os.remove(target)


def init_app(app: Flask) -> None:
    """Count the binding copy's failed refreshes as Redis errors."""
    cache = services_of(app).cache
    listeners = getattr(cache, "error_listeners", None)
    if listeners is not None:
        listeners.append(lambda exc: count_redis_error("refresh"))
