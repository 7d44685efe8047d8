"""Refuse requests whose Host is neither the address the router listens on nor an allowed name.

A DNS-rebinding attack makes a browser send the attacker's page's requests to a
router on the victim's loopback, with `Host: attacker.example` (and a matching
Origin, so CORS does not stop it). On an open server (no tokens: the
Quickstart's default) that is every operator action. A server answering only
its own address and the names an operator lists in `ROLEGATE_ALLOWED_HOSTS`
(comma-separated; `.example.com` allows every subdomain; `*` turns the check
off) never acts on such a request.

Always allowed: the loopback names (`localhost`, `127.0.0.1`, `::1`), any IP
address written as such (a rebinding needs a name the attacker's DNS answers:
a page loaded from an IP address is that address's own origin, so Prometheus
scraping a pod by IP, or a caller using one, passes) and the address the
request came in on (the WSGI server's SERVER_NAME: gunicorn's bound address)
unless that is a wildcard such as 0.0.0.0. The probes (`/healthz`, `/livez`,
`/readyz`) are exempt: they say only up or down without a token, and load
balancers probe them by any name.
"""

from __future__ import annotations

import ipaddress

from flask import Flask, request

from router.server.errors import HostNotAllowed

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})
EXEMPT_PATHS = frozenset({"/healthz", "/livez", "/readyz"})


def parse_allowed(spec: str) -> tuple[str, ...]:
    """ROLEGATE_ALLOWED_HOSTS -> lowercase names (`*` kept as is)."""
    return tuple(name.strip().lower().rstrip(".") for name in spec.split(",") if name.strip())


def hostname(host_header: str) -> str:
    """The name part of a Host header, lowercase, without port or IPv6 brackets."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def allowed(name: str, server_name: str, extra: tuple[str, ...]) -> bool:
    """Whether a request for host `name` that arrived at `server_name` may be served."""
    name = name.rstrip(".")
    if "*" in extra or name in LOOPBACK or _is_address(name):
        return True
    if server_name.lower() not in WILDCARDS and name == server_name.lower():
        return True
    for ref in extra:
        if ref.startswith(".") and (name == ref[1:] or name.endswith(ref)):
            return True
        if name == ref:
            return True
    return False


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


#: Decisions remembered per worker: (Host header, SERVER_NAME, allowed names) -> served.
#: A router sees few Host values; a flood of new ones clears it rather than growing it.
_decided: dict[tuple[str, str, tuple[str, ...]], bool] = {}
MAX_DECIDED = 1024
#: Longer Host values (no real host name is) are decided afresh each time, never kept.
_MAX_KEPT_HOST = 300


def check(header: str | None, path: str, server_name: str, allowed_hosts: tuple[str, ...]) -> None:
    """HostNotAllowed unless a request with this Host header, path and SERVER_NAME is served.

    The one Host decision: the Flask hook below and the WSGI fast paths
    (`router.server.access.admit`) both ask it. The answer depends on nothing
    else, so a repeated one comes from memory (it was 3-4% of a resolve's
    worker CPU, issue 38).
    """
    # No Host at all is an HTTP/1.0 client, never a browser (they always send one).
    if header is None or path in EXEMPT_PATHS:
        return
    key = (header, server_name, allowed_hosts)
    served = _decided.get(key)
    if served is None:
        served = allowed(hostname(header), server_name, allowed_hosts)
        if len(header) <= _MAX_KEPT_HOST:
            if len(_decided) >= MAX_DECIDED:
                _decided.clear()
            _decided[key] = served
    if not served:
        raise HostNotAllowed(
            f"Host {header[:200]!r} is not served here; the router answers its own "
            "address and loopback names, plus the names in ROLEGATE_ALLOWED_HOSTS",
            host=header[:200])


def init_app(app: Flask, allowed_hosts: tuple[str, ...]) -> None:
    """Check every request's Host before anything else runs."""

    @app.before_request
    def _check_host() -> None:
        check(request.headers.get("Host"), request.path,
              request.environ.get("SERVER_NAME", ""), allowed_hosts)
