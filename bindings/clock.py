"""The one clock a rollout's times come from: the Redis server's, read with TIME.

A stage's start (`stage_since`) is written by whichever router host served the
move, and its age is read by the gate view and judged by a gatekeeper that may
run on a third host. Each host's own clock would make the age depend on which
hosts were involved: a gatekeeper whose clock ran 2 hours ahead promoted a
3,600 s stage after 8 s. Every router therefore stamps and reads time from the
Redis server all of them share (`server_time`), and the gatekeeper judges with
the `time` the gate view carries, never its own clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bindings.connection import Connection
from bindings.redis_errors import redis_errors


def server_time(connection: Connection) -> float:
    """The Redis server's clock (TIME), in seconds since the epoch.

    A Cluster client sends TIME to every primary; the latest answer is taken
    (their clocks are the servers', kept close by NTP like any one host's).
    """
    with redis_errors():
        reply: Any = connection.time()
    if isinstance(reply, Mapping):
        reply = max(tuple(pair) for pair in reply.values())
    seconds, micros = reply
    return int(seconds) + int(micros) / 1_000_000


def redis_clock(connection: Connection) -> Callable[[], float]:
    """A clock (as `time.time` is one) that reads the Redis server's TIME on each call."""
    return lambda: server_time(connection)
