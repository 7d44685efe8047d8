"""A circuit breaker on the router's Redis client: fail fast while Redis is known to be hung.

A hung Redis (stopped, swapping, a runaway script) does not refuse connections:
every command waits the full socket timeout (2 s). Each request needing Redis
then held a gunicorn thread that long, and resolves, which need no Redis,
starved behind them (492 resolves/s fell to 5). So the first command that
times out opens the breaker: for COOLDOWN_S every command fails at once with
`CircuitOpen` (a connection error raised before anything is sent, so stores
answer 503 "not applied"). After the cool-down one command is let through as
a probe; if it is answered the breaker closes, if it times out it opens again.
Only timeouts open it: a refused connection already fails fast.

It wraps one client's connection pool (plain Redis and Sentinel; a Cluster
client has a pool per node and is left as it is), so each app has its own.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis

log = logging.getLogger("rolegate.breaker")

#: How long commands fail fast after a timeout before one probe is let through.
COOLDOWN_S = 1.0


class CircuitOpen(redis.ConnectionError):
    """Redis timed out recently: this command was not sent (see router.server.breaker)."""


class Breaker:
    """Closed, open (failing fast) or probing; shared by every thread of one process."""

    def __init__(self, cooldown: float = COOLDOWN_S) -> None:
        self.cooldown = cooldown
        self.opened_at: float | None = None
        self._probing = False
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        """True while commands fail fast."""
        return self.opened_at is not None

    def before(self) -> None:
        """Called before a command takes a connection: raise CircuitOpen while open."""
        if self.opened_at is None:
            return
        with self._lock:
            if self.opened_at is None:
                return
            waited = time.monotonic() - self.opened_at
            if waited >= self.cooldown and not self._probing:
                self._probing = True  # this command is the probe
                return
        raise CircuitOpen(f"Redis timed out {waited:.1f} s ago and is treated as hung "
                          "(circuit open): failing fast, nothing was sent")

    def answered(self) -> None:
        """A command got its answer: close the breaker."""
        if self.opened_at is None and not self._probing:
            return
        with self._lock:
            if self.opened_at is not None:
                log.warning("Redis answers again: circuit closed")
            self.opened_at = None
            self._probing = False

    def timed_out(self) -> None:
        """A command timed out: open the breaker (again)."""
        with self._lock:
            if self.opened_at is None:
                log.warning("Redis timed out: circuit open, commands fail fast for %.1f s "
                            "between probes", self.cooldown)
            self.opened_at = time.monotonic()
            self._probing = False


def install(client: Any, breaker: Breaker) -> bool:
    """Put `breaker` on `client`'s connection pool; False for a client it cannot wrap."""
    pool = getattr(client, "connection_pool", None)
    if pool is None or not hasattr(pool, "connection_class"):
        return False
    base = pool.connection_class

    class BreakerConnection(base):  # type: ignore[misc,valid-type]
        """A connection that tells the breaker whether its answers come."""

        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            try:
                response = super().read_response(*args, **kwargs)
            except redis.TimeoutError:
                breaker.timed_out()
                raise
            breaker.answered()
            return response

    BreakerConnection.__name__ = f"Breaker{base.__name__}"
    pool.connection_class = BreakerConnection
    original = pool.get_connection

    def get_connection(*args: Any, **kwargs: Any) -> Any:
        breaker.before()
        return original(*args, **kwargs)

    pool.get_connection = get_connection
    return True
