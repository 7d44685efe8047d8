"""GET /v1/bindings/watch: a long-poll that answers as soon as any binding changes.

A subscribed caller client (`rolegate.client.Client(subscribe=True)`) keeps one of
these open, so a rollback reaches it in milliseconds instead of a refresh
interval. The answer is the same body as `GET /v1/bindings` (200, ETag
`"g<generation>"`) once the generation differs from `?generation=`, or a 304
with the unchanged ETag when `?timeout=` seconds pass first.

Under the shipped gevent workers a waiting request holds one green thread (a few
KB, no CPU), so many watches cost resolves nothing; under gthread it would hold
one of a few OS threads. Either way the timeout is bounded (MAX_TIMEOUT_S), so a
watch answers before gunicorn's `timeout`. Waiters do not poll Redis in a tight loop: one daemon
thread per worker process listens on the store's `rolegate:changes` channel and
wakes them all; each waiter re-reads the generation counter at least once a
second anyway, so a message lost while the listener reconnects only costs that.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time

from flask import Blueprint, Flask, Response, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from bindings.connection import Connection
from bindings.store import CHANGES_CHANNEL
from router.api.configs import snapshot_json
from router.api.params import bodies_arg, view_arg
from router.server.auth import may_act_on, require
from router.server.errors import BadRequest
from router.server.services import services_of

bp = Blueprint("watch", __name__)
log = logging.getLogger("rolegate.watch")

#: Longest a watch may wait before answering 304; keep it under gunicorn's `timeout`.
MAX_TIMEOUT_S = 25.0
DEFAULT_TIMEOUT_S = 20.0
#: A waiter re-reads the generation this often even without a message.
RECHECK_S = 1.0
EXTENSION_KEY = "rolegate.watch"


class ChangeNotifier:
    """Wakes waiting watch requests when the store publishes a change.

    `ticks` grows by one per message (and on every reconnect, since messages may
    have been missed meanwhile). A waiter reads `ticks` before it reads the
    generation, then waits for `ticks` to move: a change published after that
    read cannot be missed.
    """

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.ticks = 0
        #: Watches waiting in this process now (the `rolegate_watches_waiting` gauge).
        self.waiting = 0
        self.subscribed = False
        #: Set by stop(): waiting watches answer at once instead of holding threads.
        self.stopped = False
        self._condition = threading.Condition()
        self._owner_pid: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wait(self, since: int, timeout: float) -> int:
        """Block until `ticks` differs from `since` or `timeout` passes; return `ticks`."""
        self._ensure_thread()
        with self._condition:
            self.waiting += 1
            try:
                self._condition.wait_for(lambda: self.ticks != since, timeout)
                return self.ticks
            finally:
                self.waiting -= 1

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the listener thread and release every waiting watch (tests; workers just exit)."""
        self._stop.set()
        self.stopped = True
        self._bump()
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout)

    def _bump(self) -> None:
        with self._condition:
            self.ticks += 1
            self._condition.notify_all()

    def _ensure_thread(self) -> None:
        # Started lazily in the serving process: gunicorn forks workers after the
        # app is built, and a thread started before the fork would not exist.
        pid = os.getpid()
        if self._owner_pid == pid:
            return
        with self._condition:
            if self._owner_pid == pid:
                return
            self._owner_pid = pid
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, name="rolegate-watch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            pubsub = self.connection.pubsub(
                ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(CHANGES_CHANNEL)
                self.subscribed = True
                self._bump()
                while not self._stop.is_set():
                    if pubsub.get_message(timeout=0.5) is not None:
                        self._bump()
            except Exception as exc:  # noqa: BLE001 - the listener must outlive any failure
                # Lost Redis, or the app's client closed under it (a connection the
                # parser finds without a socket raises TypeError): every waiting
                # watch still answers within RECHECK_S, and this retries.
                if self.subscribed and not self._stop.is_set():
                    log.warning("change listener lost Redis, retrying: %s", exc)
                self.subscribed = False
                self._stop.wait(0.5)
            finally:
                self.subscribed = False
                pubsub.close()


def init_app(app: Flask) -> None:
    """Give the app its change notifier (its thread starts on the first watch)."""
    app.extensions[EXTENSION_KEY] = ChangeNotifier(services_of(app).redis)


def notifier(app: Flask) -> ChangeNotifier:
    """The app's change notifier."""
    found: ChangeNotifier = app.extensions[EXTENSION_KEY]
    return found


@bp.get("/v1/bindings/watch")
@require("caller", "reviewer", "gatekeeper")
def watch() -> ResponseReturnValue:
    """Answer with every binding once the generation differs from `?generation=`."""
    known = _generation_arg()
    view, bodies = view_arg(), bodies_arg()
    timeout = _timeout_arg()
    store = services_of(current_app).store
    changes = notifier(current_app)
    deadline = time.monotonic() + timeout
    since = changes.ticks
    generation = store.generation()
    while generation == known:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or changes.stopped:
            return _not_modified(generation)
        since = changes.wait(since, min(remaining, RECHECK_S))
        if changes.stopped:
            # Shutting down: answer without another Redis read.
            return _not_modified(generation)
        generation = store.generation()
    # Roles Redis lost keep their last good record, marked stale (router.server.cache).
    generation, records, lost = services_of(current_app).cache.guarded()
    body = snapshot_json(generation, {role: rec for role, rec in records.items()
                                      if may_act_on(role)}, view, bodies)
    if lost:
        body["stale"] = True
    response = jsonify(body)
    response.headers["ETag"] = f'"g{generation}"'
    response.headers["Cache-Control"] = "no-store"
    return response


def _not_modified(generation: int) -> Response:
    response = Response(status=304)
    response.headers["ETag"] = f'"g{generation}"'
    response.headers["Cache-Control"] = "no-store"
    return response


def _generation_arg() -> int | None:
    raw = request.args.get("generation")
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(f"generation: expected a whole number, got {raw!r}",
                         field="generation") from None


def _timeout_arg() -> float:
    raw = request.args.get("timeout")
    if raw is None or raw == "":
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= MAX_TIMEOUT_S:  # also refuses NaN
        raise BadRequest(f"timeout: expected seconds within 0..{MAX_TIMEOUT_S:g}, got {raw!r}",
                         field="timeout")
    return value
