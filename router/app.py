"""The router app: settings, long-lived clients and blueprints, assembled by create_app()."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flask import Flask

from bindings.clock import redis_clock
from bindings.connection import connect
from bindings.identity import describe
from bindings.store import BindingStore
from router.api.bodies import refuse_oversized_chunked
from router.server import breaker, errors, hosts
from router.server.cache import BindingCache
from router.server.quota import parse_quota
from router.server.services import EXTENSION, Services
from router.server.settings import load_settings
from router.server.tokens import TokenTable

log = logging.getLogger("rolegate")
#: The last good binding table, kept in the data directory by every worker.
SNAPSHOT_FILE = "bindings.snapshot.json"

#: Each module exposes `bp` (a Blueprint) and may expose `init_app(app)`.
BLUEPRINT_MODULES = (
    "router.server.logs",
    "router.server.metrics",
    "router.server.cors",
    "router.openapi.document",
    "router.dashboard.views",
    "router.api.health",
    "router.api.resolve",
    "router.api.bindings",
    "router.api.archive",
    "router.api.restore_snapshot",
    "router.api.accept_redis",
    "router.api.traces",
    "router.api.gate",
    "router.api.fleet",
    "router.api.lease",
    "router.api.drift",
    "router.api.watch",
    "router.api.configs",
    "router.api.feedback",
    "router.api.judges",
    "router.api.trace_reads",
    "router.api.offline",
    "router.api.exposures",
    "router.api.ofrep",
)


def create_app(test_config: Mapping[str, Any] | None = None) -> Flask:
    """Build the router: settings, then Redis and the binding cache, then the blueprints."""
    settings = load_settings(test_config)
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config["TESTING"] = settings.testing
    connection = connect(settings.redis_target())
    # Fail fast while Redis is hung, instead of every request waiting out its timeout.
    guard = breaker.Breaker()
    installed = breaker.install(connection, guard)
    # Stage times come from Redis, not this host: every router and gatekeeper agree (bindings.clock).
    store = BindingStore(connection, redis_clock(connection), min_replicas=settings.min_replicas,
                         replica_wait_ms=settings.replica_wait_ms)
    tokens = TokenTable(settings.tokens, settings.tokens_file)
    if tokens.open:
        log.warning(
            "ROLEGATE_TOKENS and ROLEGATE_TOKENS_FILE are unset: rolegate is running OPEN, "
            "every request acts as an operator. Set tokens before exposing it."
        )
    app.extensions[EXTENSION] = Services(
        settings=settings,
        redis=connection,
        store=store,
        cache=BindingCache(store, settings.refresh_interval_s,
                           settings.full_reload_interval_s,
                           address=describe(settings.redis_target())),
        tokens=tokens,
        quota=parse_quota(settings.ingest_quota),
        breaker=guard if installed else None,
    )
    errors.init_app(app)
    # Before every other hook: a request for a foreign Host is refused untouched.
    hosts.init_app(app, hosts.parse_allowed(settings.allowed_hosts))
    app.before_request(refuse_oversized_chunked)
    for name in BLUEPRINT_MODULES:
        module = importlib.import_module(name)
        app.register_blueprint(module.bp)
        if hasattr(module, "init_app"):
            module.init_app(app)
    return app


def worker_started(app: Any) -> None:
    """In a gunicorn worker before its first request (post_worker_init): load the table now.

    The worker also keeps each new table in the data directory and, when Redis
    does not answer as it starts, serves the one kept there, marked stale.
    Only served workers do this, not every app a test builds.
    """
    found = getattr(app, "extensions", {}).get(EXTENSION)
    if not isinstance(found, Services):
        return  # not the router (a bench's bare app under the same config)
    found.cache.snapshot_path = Path(found.settings.data_dir) / SNAPSHOT_FILE
    found.cache.start()


def worker_stopping(app: Any) -> None:
    """In a gunicorn worker told to stop (SIGTERM): answer every open watch now.

    New watches answer at once from here on (router.api.watch). It waits for
    the change listener to stop, so the caller runs it off the signal handler.
    """
    if not isinstance(getattr(app, "extensions", {}).get(EXTENSION), Services):
        return
    from router.api.watch import notifier

    notifier(app).stop()


__all__ = ["BLUEPRINT_MODULES", "SNAPSHOT_FILE", "Services", "create_app", "worker_started",
           "worker_stopping"]
