"""Gunicorn settings for rolegate's router (`rolegate serve` passes this file).

It ships in the package, so an installed rolegate serves from any directory;
deploy/gunicorn.conf.py runs this module for the deploy files that name it.
gunicorn reads it as a file, without importing the `router` package first.
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
# One worker per core, each a gevent worker: one process serving many requests
# on green threads. Why not gthread (the default before 2026-12): every request
# holds one of a gthread worker's few threads for as long as it lasts, so 16 open
# `GET /v1/bindings/watch` long-polls (one per subscribed client) took resolves
# from 667 to 0.1 per second, and a hung Redis left every thread waiting on it.
# A green thread waiting on a socket costs a few KB and no CPU: with 200 watches
# open, or with Redis hung under trace load, resolves keep their rate
# (`python -m bench.serving --parts 2,3`). The catch: CPU-bound work blocks its
# whole worker, so no request may compute for long (heavy reads are bounded;
# see docs/operations.md). gthread stays available: ROLEGATE_WORKER_CLASS=gthread
# (then long-polls hold threads again: don't subscribe many clients to it).
workers = int(_env("ROLEGATE_WORKERS", str(multiprocessing.cpu_count())))
worker_class = _env("ROLEGATE_WORKER_CLASS", "gevent")
# gevent: most connections one worker holds at once (watches included).
worker_connections = int(_env("ROLEGATE_WORKER_CONNECTIONS", "1000"))
# gthread only: threads per worker.
threads = int(_env("ROLEGATE_THREADS", "4"))
# An idle keep-alive connection holds its worker this long after SIGTERM too:
# 2 s (gunicorn's own default) keeps a router's stop under 5 s (issue 36).
keepalive = int(_env("ROLEGATE_KEEPALIVE", "2"))
timeout = int(_env("ROLEGATE_TIMEOUT", "30"))
# The longest a stopping worker waits for requests in flight. Open watches are
# answered at once on SIGTERM (post_worker_init below), so a worker is normally
# idle within a second or two; this bounds a slow trace write or a hung Redis.
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
# data directories: on_starting refuses a directory another live router holds.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR",
                      os.path.join(_env("ROLEGATE_DATA_DIR", ".rolegate"), "prometheus"))

# --- Server hooks ------------------------------------------------------------
# The master starts the embedded Redis (when REDIS_URL is unset) and loads the
# seed bindings once, before any worker forks; workers inherit REDIS_URL.


def on_starting(server: Any) -> None:
    """Before the workers fork: embedded Redis if needed, then the seed file."""
    if server.cfg.worker_class_str == "gevent":
        # Each gevent worker patches the standard library when it starts, but it
        # inherits redis-py and urllib3 from this master, already holding names
        # taken from the unpatched ssl (gevent warns: their TLS sockets would
        # block the worker). Patch ssl alone here, before this hook imports
        # anything of ours, so those names are gevent's from the start. Only
        # ssl: the master's threads, signals and child processes stay as
        # gunicorn and the embedded server's supervisor expect.
        from gevent import monkey  # type: ignore[import-untyped]  # no stubs

        monkey.patch_ssl()
    from router.cli.serve import master_starting
    from router.server.data_dir import claim_for_router
    from router.server.metrics import clear_multiproc_dir
    from router.server.one_send import install
    from router.server.peer_trust import install as memoise_peer_trust

    # One router per data directory, claimed before its metrics files are emptied:
    # a second router on it refuses to start (router.server.data_dir).
    claim_for_router(_env("ROLEGATE_DATA_DIR", ".rolegate"),
                     os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    # Headers and body of each answer in one send (ROLEGATE_ONE_SEND=0: gunicorn's two);
    # set here, in the master, so every worker forks with it.
    install()
    # Whether a peer may set forwarding headers, decided once per address (router.server.peer_trust).
    memoise_peer_trust()
    clear_multiproc_dir()
    master_starting(server.log)


if loglevel.lower() != "debug":
    # gunicorn's default pre_request writes "<method> <path>" at debug level, paying a
    # logger call and two config lookups per request even when debug is off (3-4% of a
    # resolve's worker CPU, issue 38). Below debug it would write nothing: do nothing.
    # At ROLEGATE_LOG_LEVEL=debug gunicorn's own hook stays and writes its line.
    def pre_request(worker: Any, req: Any) -> None:
        """Nothing before each request (gunicorn's default only logs at debug level)."""


def post_worker_init(worker: Any) -> None:
    """A worker has its app: load the binding table now (from disk if Redis is down).

    Then chain a step in front of gunicorn's SIGTERM handler: open watches
    (`GET /v1/bindings/watch` long-polls, up to 25 s each) are answered at once,
    so the worker is idle within a second and exits; their clients reconnect
    to another router. Without it a router waited out graceful_timeout.
    """
    import signal

    from router.app import worker_started, worker_stopping
    from router.server.frozen_config import freeze

    # This worker's settings never change now: read them as plain attributes from here on.
    freeze(worker.cfg)
    worker_started(worker.wsgi)
    gunicorns = signal.getsignal(signal.SIGTERM)

    def stopping(signum: int, frame: Any) -> None:
        # A signal handler must not block (under gevent it runs in the event loop
        # and may not wait at all): release the watches from a green or OS thread.
        if worker.cfg.worker_class_str == "gevent":
            import gevent

            gevent.spawn(worker_stopping, worker.wsgi)
        else:
            import threading

            threading.Thread(target=worker_stopping, args=(worker.wsgi,),
                             name="rolegate-watch-release", daemon=True).start()
        if callable(gunicorns):
            gunicorns(signum, frame)

    signal.signal(signal.SIGTERM, stopping)
    # Everything loaded so far (modules, the app, the binding table) lives as long as
    # the worker: out of the collector's reach, a full collection walks only what
    # requests made since (about half of a 100-trace ingest's GC time, issue 38).
    import gc

    gc.collect()
    gc.freeze()
    # A young generation that outgrows what requests hold at once: each collection walks
    # every container alive, and at the default 700 a 100-trace ingest (a few thousand
    # containers until it answers) set off one or two per request, promoting its traces
    # to be walked again by older collections (about 4% of its CPU in process, issue 38).
    # Freed objects leave the count: it is cyclic garbage that waits longer, not memory.
    gc.set_threshold(50_000, *gc.get_threshold()[1:])


def worker_exit(server: Any, worker: Any) -> None:
    """A worker leaves cleanly: run the exit handlers (log lines) and end the process now.

    Python's own teardown of a worker (every module of Flask, pydantic, redis,
    prometheus) took 1-2 s after the worker was done, most of the 5 s a stopping
    router may take. A worker that failed (a boot error's exit code tells the
    master to halt) exits the ordinary way.
    """
    import atexit
    import os
    import sys

    leaving = sys.exc_info()[1]  # called from gunicorn's `finally`, after sys.exit(...)
    if not isinstance(leaving, SystemExit) or leaving.code not in (0, None):
        return
    atexit._run_exitfuncs()  # the queued log lines, logging's own flush
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def child_exit(server: Any, worker: Any) -> None:
    """A worker is gone: fold its gauges out of the metrics (its counters stay summed)."""
    from router.server.metrics import mark_worker_dead

    mark_worker_dead(worker.pid)


def on_exit(server: Any) -> None:
    """After the workers are gone: stop the embedded Redis, if the master started one."""
    from router.cli.serve import master_exiting

    master_exiting(server.log)
