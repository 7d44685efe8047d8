"""Connections the trace store keeps between its script calls, checked by a cheap peek.

redis-py's pool checks every connection it hands out with `can_read()`: a
poll of the socket, which under gevent (the router's worker) goes through the
event loop. Measured under gunicorn on a single-trace POST (py-spy, GIL
samples) the pool's checkout cost about 60 us of a 450 us request, against
about 35 us in a bare Flask app making one SET: the biggest piece of the
difference (bench/serving.py, figure 4).

`KeptConnections` takes connections from the pool once and keeps the ones
whose last command completed. Before reusing one it peeks at the operating
system socket without blocking: nothing to read means ready; an end of file
(Redis restarted, the connection dropped) or stray bytes mean it goes back to
the pool disconnected, and the next one is tried. A connection whose command
failed in any other way than an error reply, or was interrupted, is never
kept. `before` runs before a kept connection is reused: it is the hook the
pool's own `get_connection` runs (the router's circuit breaker wraps it: fail
fast while Redis is known to be hung), so every call runs it exactly once; twice
would spend the breaker's one probe on nothing and leave it open for good.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import hiredis
import redis

#: Peek without waiting: BlockingIOError means no bytes are waiting.
_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT


class KeptConnections:
    """A free list over one redis-py connection pool, for one caller's round trips."""

    def __init__(self, pool: Any, before: Callable[[], None] | None = None) -> None:
        self.pool = pool
        self.before = before
        self._idle: list[Any] = []
        self._pid = os.getpid()

    def call(self, *command: Any) -> Any:
        """Send `command` on a ready connection and read its answer."""
        return self.pipeline([command])[0]

    def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send `commands` in one write on a ready connection; their answers, in order.

        Packed by hiredis in C, whole: redis-py's packer encodes each argument in
        Python (a type check and an encode per argument), which for a 100-trace
        ingest call of ~300 arguments was about a sixth of the request's CPU.
        An error reply is raised once every answer is read, the first one, as
        redis-py's pipeline does (the connection is then clean and kept).
        """
        conn = self._take()
        answers: list[Any] = []
        failed: redis.ResponseError | None = None
        try:
            conn.send_packed_command([b"".join([hiredis.pack_command(c) for c in commands])])
            for _ in commands:
                try:
                    answers.append(conn.read_response())
                except redis.ResponseError as exc:
                    # Read whole: the connection stays in step; the rest still come.
                    failed = failed or exc
                    answers.append(exc)
        except BaseException:
            # Half sent or half read: whatever is left belongs to this connection only.
            conn.disconnect()
            self.pool.release(conn)
            raise
        self._idle.append(conn)
        if failed is not None:
            raise failed
        return answers

    def _take(self) -> Any:
        if self._pid != os.getpid():
            # A forked child must not share its parent's sockets.
            self._idle, self._pid = [], os.getpid()
        while True:
            try:
                conn = self._idle.pop()
            except IndexError:
                # The pool runs its own hook (the breaker wraps get_connection): once.
                return self.pool.get_connection()
            if not ready(conn):
                conn.disconnect()
                self.pool.release(conn)
                continue
            if self.before is not None:
                try:
                    self.before()
                except BaseException:
                    self._idle.append(conn)
                    raise
            return conn


def ready(conn: Any) -> bool:
    """True when the connection is open and nothing waits to be read on it."""
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return False
    raw = getattr(sock, "_sock", sock)  # gevent wraps the OS socket: peek at that one
    # A socket with a timeout would first wait (poll) for data up to it: not here.
    timeout = raw.gettimeout()
    if timeout != 0.0:
        raw.settimeout(0.0)
    try:
        raw.recv(1, _PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        if timeout != 0.0:
            raw.settimeout(timeout)
    return False  # an end of file, or bytes nobody asked for
