"""Gunicorn settings for rolegate's router (`rolegate serve` passes this file).

Every setting can be overridden from the environment (ROLEGATE_*), and
`rolegate serve --host/--port/--workers` override bind and workers on the
command line. Never start the gatekeeper loop here: N workers would be N loops;
it runs as its own process (`rolegate gatekeeper`, deploy/rolegate-gatekeeper.service).
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Any


def _env(name: str, default: str) -> str:
    value = os.environ.get(name, "")
    return value if value != "" else default


# --- Server socket -----------------------------------------------------------
# Loopback by default: put a TLS-terminating proxy in front before exposing it.
bind = [_env("ROLEGATE_BIND", "127.0.0.1:8080")]
backlog = int(_env("ROLEGATE_BACKLOG", "2048"))

# --- Worker processes --------------------------------------------------------
# One worker per core. gthread rather than sync: it keeps connections alive, so
# callers resolving in a loop skip a TCP handshake each, and a slow client ties
# up one thread instead of a whole worker. An early probe measured ~1.4x sync's
# req/s; bench/resolve.py measures both on each run, and on the shared 2-core
# machine of 2026-11-30 found them level (0.7-1.2x req/s, equal CPU/request).
workers = int(_env("ROLEGATE_WORKERS", str(multiprocessing.cpu_count())))
worker_class = _env("ROLEGATE_WORKER_CLASS", "gthread")
threads = int(_env("ROLEGATE_THREADS", "4"))
keepalive = int(_env("ROLEGATE_KEEPALIVE", "5"))
timeout = int(_env("ROLEGATE_TIMEOUT", "30"))
graceful_timeout = int(_env("ROLEGATE_GRACEFUL_TIMEOUT", "10"))
# Each worker builds its own app: its binding copy, refresh thread and Redis
# connection pool must belong to the process that uses them.
preload_app = False

# --- Logging -----------------------------------------------------------------
# The access log is off unless asked for: a line per resolve costs the hot path.
accesslog = os.environ.get("ROLEGATE_ACCESS_LOG") or None
errorlog = "-"
loglevel = _env("ROLEGATE_LOG_LEVEL", "info")
proc_name = "rolegate-router"

# --- Control socket ----------------------------------------------------------
# gunicorn's runtime control socket defaults to one path per user
# (~/.gunicorn/gunicorn.ctl), which several routers on one host would fight
# over. Off unless ROLEGATE_CONTROL_SOCKET names a path.
control_socket_disable = not os.environ.get("ROLEGATE_CONTROL_SOCKET")
if not control_socket_disable:
    control_socket = os.environ["ROLEGATE_CONTROL_SOCKET"]

# --- Metrics -----------------------------------------------------------------
# prometheus-client sums every worker's counters from files in this directory
# (its multiprocess mode), so /metrics is right whichever worker answers. It is
# read when prometheus_client is first imported, so it is set here, in the
# master, before any worker imports the app; on_starting empties it, so a
# restart does not add the last run's counts. Two routers on one host need two
# data directories anyway (each has its own embedded Redis there).
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR",
                      os.path.join(_env("ROLEGATE_DATA_DIR", ".rolegate"), "prometheus"))

# --- Server hooks ------------------------------------------------------------
# The master starts the embedded Redis (when REDIS_URL is unset) and loads the
# seed bindings once, before any worker forks; workers inherit REDIS_URL.


def on_starting(server: Any) -> None:
    """Before the workers fork: embedded Redis if needed, then the seed file."""
    from router.cli.serve import master_starting
    from router.server.metrics import clear_multiproc_dir

    clear_multiproc_dir()
    master_starting(server.log)


def post_worker_init(worker: Any) -> None:
    """A worker has its app: load the binding table now (from disk if Redis is down)."""
    from router.app import worker_started

    worker_started(worker.wsgi)


def child_exit(server: Any, worker: Any) -> None:
    """A worker is gone: fold its gauges out of the metrics (its counters stay summed)."""
    from router.server.metrics import mark_worker_dead

    mark_worker_dead(worker.pid)


def on_exit(server: Any) -> None:
    """After the workers are gone: stop the embedded Redis, if the master started one."""
    from router.cli.serve import master_exiting

    master_exiting(server.log)
