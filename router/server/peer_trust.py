"""gunicorn's "may this peer set forwarding headers?" answered once per peer address.

For every request gunicorn asks whether the connecting address is in
`forwarded_allow_ips` (`gunicorn.http.message._ip_in_allow_list`): it parses
the address with `ipaddress.ip_address` and tests it against each allowed
network, every time, though a keep-alive connection's peer never changes and a
router sees few distinct peers (its proxies, its agents' hosts). Under resolve
load that was 3-4% of a worker's CPU (issue 38).

`install()` puts a memo in front of that function: the same answer for the
same (address, allow list), kept for at most MAX_PEERS addresses (then
forgotten and learnt again, so a flood of new peers costs what it did). The
allow list is part of the key, so a reloaded config is asked afresh. The
router's gunicorn config calls it in the master, so every worker forks with it;
if gunicorn's function is not the one this knows, nothing is installed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from gunicorn.http import message  # type: ignore[import-untyped]  # no stubs

#: Addresses remembered per worker before the memo starts afresh.
MAX_PEERS = 4096
_NAME = "_ip_in_allow_list"
_PARAMETERS = ["ip_str", "allow_list", "networks"]


def memoised(original: Callable[[str, Sequence[str], Any], bool],
             limit: int = MAX_PEERS) -> Callable[[str, Sequence[str], Any], bool]:
    """`original`, answering a repeated (address, allow list) from memory."""
    seen: dict[tuple[str, tuple[str, ...]], bool] = {}

    def allowed(ip_str: str, allow_list: Sequence[str], networks: Any) -> bool:
        key = (ip_str, tuple(allow_list))
        found = seen.get(key)
        if found is None:
            if len(seen) >= limit:
                seen.clear()
            found = seen[key] = bool(original(ip_str, allow_list, networks))
        return found

    allowed.__wrapped__ = original  # type: ignore[attr-defined]
    return allowed


def install() -> bool:
    """Memoise gunicorn's peer check; False when this gunicorn has no such function."""
    original = getattr(message, _NAME, None)
    if original is None or hasattr(original, "__wrapped__"):
        return False
    if list(inspect.signature(original).parameters) != _PARAMETERS:
        return False
    setattr(message, _NAME, memoised(original))
    return True
