"""One send per answer under gunicorn: status line, headers and body in a single `sendall`.

gunicorn's HTTP/1 `Response.write` sends the headers in one `sendall` and the
body in another, whatever the answer. For rolegate's hot answers (a resolve,
an OFREP evaluation, a single trace's receipt: a few hundred bytes with a
Content-Length) that is two system calls and, with TCP_NODELAY, two packets
where one does: a worker profile under resolve load put 29% of its time in
those two sends (issue 38).

`OneSendResponse` changes only that: when the headers have not gone out yet,
the answer declares its length and this first write carries the whole body,
headers and body leave together. Every other case (a chunked or streamed
answer, a body in several pieces, HEAD, 204/304, a file) is gunicorn's own
code path untouched. `install()` makes gunicorn build it for HTTP/1 requests
(`gunicorn.http.wsgi.create` reads the module's `Response` when it is called);
HTTP/2 keeps its own writer. The router's gunicorn config calls it in the
master, so every worker (sync, gthread, gevent) forks with it;
`ROLEGATE_ONE_SEND=0` leaves gunicorn as it is (the bench compares the two).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from gunicorn import util  # type: ignore[import-untyped]  # no stubs
from gunicorn.http import wsgi  # type: ignore[import-untyped]  # no stubs

log = logging.getLogger("rolegate")
#: Set to 0 to keep gunicorn's two sends (a comparison, or a gunicorn this does not know).
ENV = "ROLEGATE_ONE_SEND"
#: What this relies on in gunicorn's Response; any missing and it is not installed.
_RELIED_ON = ("default_headers", "send_headers", "write", "headers", "headers_sent",
              "chunked", "response_length", "sent", "_omits_body", "sock", "upgrade",
              "should_close", "version", "req", "status")
#: The Date header's value and the second it names: formatted once a second, not per answer.
_date: tuple[int, str] = (0, "")


def http_date() -> str:
    """gunicorn's `util.http_date()` for now, formatted at most once per second."""
    global _date  # noqa: PLW0603 - one cached value per worker process
    now = int(time.time())
    if _date[0] != now:
        _date = (now, util.http_date(now))
    return _date[1]


_Base: Any = wsgi.Response


class OneSendResponse(_Base):  # type: ignore[misc]  # gunicorn's class is untyped (Any)
    """gunicorn's HTTP/1 Response, sending headers with a whole first body in one call."""

    headers_sent: bool
    sent: int

    def default_headers(self) -> list[str]:
        """gunicorn's status line and default headers, its Date formatted once a second.

        The same lines as gunicorn's own `default_headers` (formatting the date
        was about 2% of a resolve's worker CPU).
        """
        if self.upgrade:
            connection = "upgrade"
        elif self.should_close():
            connection = "close"
        else:
            connection = "keep-alive"
        version = self.req.version
        headers = [f"HTTP/{version[0]}.{version[1]} {self.status}\r\n",
                   f"Server: {self.version}\r\n", f"Date: {http_date()}\r\n",
                   f"Connection: {connection}\r\n"]
        if self.chunked:
            headers.append("Transfer-Encoding: chunked\r\n")
        return headers

    def write(self, arg: bytes) -> None:
        """Write `arg`; headers and body together when `arg` is the whole declared body."""
        if (self.headers_sent or not isinstance(arg, bytes) or not arg or self.chunked
                or self._omits_body or self.response_length != len(arg)):
            super().write(arg)
            return
        # The header block exactly as gunicorn's send_headers builds it.
        lines = self.default_headers()
        lines.extend(f"{name}: {value}\r\n" for name, value in self.headers)
        head = util.to_bytestring("{}\r\n".format("".join(lines)), "latin-1")
        self.headers_sent = True
        self.sent += len(arg)
        util.write(self.sock, head + arg)


class _GunicornsHeaders(OneSendResponse):
    """OneSendResponse with gunicorn's own `default_headers` (its Date formatted per answer):
    installed when this gunicorn's lines are not the ones OneSendResponse writes."""

    def default_headers(self) -> list[str]:
        """gunicorn's own lines, as its Response writes them."""
        lines: list[str] = super(OneSendResponse, self).default_headers()
        return lines


class _ProbeRequest:
    """What gunicorn's `default_headers` reads of a request, for `same_default_headers`."""

    version = (1, 1)
    method = "GET"

    def should_close(self) -> bool:
        """A keep-alive request."""
        return False


def same_default_headers() -> bool:
    """Whether OneSendResponse's status line and default headers are this gunicorn's own.

    `OneSendResponse.default_headers` copies gunicorn's (to format the Date once a
    second); a gunicorn release that adds or changes a line would otherwise have it
    silently dropped from every answer.
    """
    for _ in range(3):  # the second may turn between the two calls: try again
        try:
            lines = []
            for cls in (OneSendResponse, _Base):
                probe = cls(_ProbeRequest(), None, None)
                probe.status, probe.status_code = "200 OK", 200
                lines.append(probe.default_headers())
        except Exception:  # noqa: BLE001 - any change to what it reads: use gunicorn's own
            return False
        if lines[0] == lines[1]:
            return True
    return False


def supported() -> bool:
    """Whether this gunicorn's Response has what OneSendResponse relies on."""
    probe = _Base.__new__(_Base)
    try:
        probe.__init__(None, None, None)
    except Exception:  # noqa: BLE001 - any change to its constructor: do not install
        return False
    return all(hasattr(probe, name) for name in _RELIED_ON)


def install(environ: dict[str, str] | None = None) -> bool:
    """Make gunicorn answer HTTP/1 requests with OneSendResponse; False when left as it was."""
    env = os.environ if environ is None else environ
    if env.get(ENV, "1") == "0":
        return False
    if not supported():
        log.warning("one send per answer off: this gunicorn's Response is not the one "
                    "router.server.one_send knows")
        return False
    if same_default_headers():
        wsgi.Response = OneSendResponse
    else:
        log.warning("the Date header is formatted per answer: this gunicorn's default headers "
                    "are not the ones router.server.one_send writes")
        wsgi.Response = _GunicornsHeaders
    return True
