"""The gated criteria of a config, for the unit test: its spec read at most once per TTL_S.

A config's spec criteria (`gatekeeper.checks.criteria`) are otherwise scored
when a gate view reads the newest runs; the unit test needs each run's
verdicts once, when it is stored, to file its units' first `crit:<key>`
events. The deterministic checks are cheap; the config's record is read from
Redis at most once per `TTL_S` per worker (a spec registered or changed is
seen within that), and a config without a spec costs nothing after its first
read.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from bindings.models import Binding
from gatekeeper.checks.criteria import Criterion
from gatekeeper.store.configs import ConfigStore

TTL_S = 5.0

_cache: dict[tuple[int, str], tuple[float, tuple[Criterion, ...]]] = {}
_lock = threading.Lock()


def gated(criteria: tuple[Criterion, ...], binding: Binding) -> tuple[Criterion, ...]:
    """The deterministic criteria the policy gates (not "observed")."""
    modes = binding.gate.criteria
    return tuple(c for c in criteria
                 if c.deterministic and modes.get(c.key, "gated") != "observed")


def config_criteria(connection: Any, config: str, now: float | None = None,
                    ) -> tuple[Criterion, ...]:
    """The config's spec criteria (none without a spec), read through the worker's cache."""
    now = time.monotonic() if now is None else now
    key = (id(connection), config)
    with _lock:
        found = _cache.get(key)
    if found is not None and found[0] > now:
        return found[1]
    record = ConfigStore(connection).find(config)
    criteria = () if record is None else tuple(record.criteria)
    with _lock:
        if len(_cache) > 4096:
            _cache.clear()
        _cache[key] = (now + TTL_S, criteria)
    return criteria

