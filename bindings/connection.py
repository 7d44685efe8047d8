"""The Redis client rolegate talks through: one server, a Sentinel-managed primary, or a Cluster.

Chosen from the settings alone (docs/scaling.md):

- Sentinels given (``REDIS_SENTINELS``, ``REDIS_SENTINEL_MASTER``): redis-py's
  ``Sentinel(...).master_for(name)``, whose pool asks the Sentinels for the
  primary on every new connection, so a failover needs no restart.
- Otherwise ``REDIS_URL``; if that node says ``cluster_enabled:1`` in
  ``INFO cluster``, redis-py's ``RedisCluster`` (slots discovered from it),
  else a plain ``redis.Redis``.

The stores accept either client (`Connection`): every script and transaction
they run touches one hash slot, and the few cross-slot steps are separate calls.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeGuard, cast

import redis
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

log = logging.getLogger("rolegate.redis")

#: What a store is given: a plain (or Sentinel-managed) client, or a Cluster client.
Connection: TypeAlias = redis.Redis | RedisCluster


class ConnectionSettingsError(ValueError):
    """The Redis settings cannot be used (a malformed Sentinel address, a missing name)."""


@dataclass(frozen=True)
class RedisTarget:
    """Where Redis is, as configured: a URL, or Sentinels and the name they monitor."""

    url: str
    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_master: str | None = None
    socket_timeout: float = 2.0
    connect_timeout: float = 2.0


def parse_sentinels(raw: str) -> tuple[tuple[str, int], ...]:
    """`host:port,host:port` as (host, port) pairs; ConnectionSettingsError naming a bad one."""
    found = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConnectionSettingsError(
                f"REDIS_SENTINELS: expected host:port, got {item!r}")
        found.append((host.strip("[]"), int(port)))
    return tuple(found)


def connect(target: RedisTarget) -> Connection:
    """A client for `target`: Sentinel-managed, Cluster (detected) or plain."""
    options: dict[str, Any] = {"socket_timeout": target.socket_timeout,
                               "socket_connect_timeout": target.connect_timeout}
    if target.sentinels:
        if not target.sentinel_master:
            raise ConnectionSettingsError(
                "REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER (the monitored name) is not")
        sentinel = Sentinel(
            list(target.sentinels), sentinel_kwargs=dict(options), **options)
        # health_check_interval: a pooled connection idle past it is PINGed before
        # use, so one that a failover left pointing at a demoted primary is dropped.
        primary = sentinel.master_for(
            target.sentinel_master, health_check_interval=30, **options)
        return cast(redis.Redis, primary)
    if is_cluster(target.url, options):
        log.info("REDIS_URL names a Redis Cluster node: using the cluster client")
        return RedisCluster.from_url(target.url, **options)
    return redis.Redis.from_url(target.url, health_check_interval=30, **options)


def is_cluster(url: str, options: dict[str, Any] | None = None) -> bool:
    """Whether the server at `url` runs in cluster mode (False when it does not answer).

    A router started while Redis is down cannot tell; it uses a plain client and
    says so, and a restart once Redis is back picks the cluster client.
    """
    probe = redis.Redis.from_url(url, **(options or {}))
    try:
        info = probe.info("cluster")
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        log.warning("could not ask %s whether it is a cluster node (%s); "
                    "connecting as to a single server", _safe(url), exc)
        return False
    finally:
        probe.close()
    return str(info.get("cluster_enabled", 0)) == "1"


def is_cluster_client(connection: Connection) -> TypeGuard[RedisCluster]:
    """Whether `connection` is a Cluster client (stores pick their cross-slot paths by it)."""
    return isinstance(connection, RedisCluster)


def _safe(url: str) -> str:
    """`url` without a password, for logs."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest
