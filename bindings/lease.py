"""The gatekeeper leader lease: one Redis key, set NX with an expiry, owned by a holder token.

Acquire is SET NX PX. Renew and release are Lua scripts that first check the
key still holds *our* token (as redis-py's Lock does), so a gatekeeper whose
lease expired and was taken over can neither extend nor delete its successor's.
"""

from __future__ import annotations

from dataclasses import dataclass

from bindings.connection import Connection
from bindings.store import _redis_errors

LEASE_KEY_TEMPLATE = "rolegate:lease:{name}"
DEFAULT_LEASE = "gatekeeper"

# KEYS: lease key. ARGV: holder, ttl ms. Returns 1 when renewed, 0 when not ours.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: lease key. ARGV: holder. Returns 1 when released, 0 when not ours.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def lease_key(name: str = DEFAULT_LEASE) -> str:
    """The Redis key of a named lease."""
    return LEASE_KEY_TEMPLATE.format(name=name)


@dataclass(frozen=True)
class LeaseState:
    """Who holds the lease and for how much longer (holder None when free)."""

    holder: str | None
    ttl_ms: int


class LeaseStore:
    """Acquire-or-renew, release and read a named lease."""

    def __init__(self, connection: Connection, name: str = DEFAULT_LEASE) -> None:
        self.connection = connection
        self.key = lease_key(name)
        self._renew = connection.register_script(_RENEW)
        self._release = connection.register_script(_RELEASE)

    def acquire(self, holder: str, ttl_ms: int) -> bool:
        """Take the lease for `holder`, or extend it if `holder` already has it."""
        with _redis_errors():
            if self.connection.set(self.key, holder, nx=True, px=ttl_ms):
                return True
            return bool(self._renew(keys=[self.key], args=[holder, ttl_ms]))

    def release(self, holder: str) -> bool:
        """Give the lease up, only if `holder` holds it."""
        with _redis_errors():
            return bool(self._release(keys=[self.key], args=[holder]))

    def state(self) -> LeaseState:
        """The current holder and remaining time."""
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=True)
            pipe.get(self.key)
            pipe.pttl(self.key)
            raw, ttl = pipe.execute()
        holder = raw.decode() if isinstance(raw, bytes) else raw
        return LeaseState(holder=holder, ttl_ms=max(0, int(ttl)) if holder else 0)
