"""The one HTTP client for rolegate's API, shared by the CLI, the gatekeeper and callers.

One `requests.Session`, a timeout on every call, and tenacity retrying only what
a retry can fix: connection errors and timeouts, never a 4xx or a 5xx answer.
Bounded by attempts and by time, exponential backoff with jitter, and
`ROLEGATE_RETRY_NO_WAIT=1` removes the waiting in tests (as stamina does).
"""

from __future__ import annotations

import email.utils
import os
import time
from collections.abc import Mapping
from typing import Any

import requests
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
    wait_none,
    wait_random,
)

from rolegate.errors import InvalidToken

RETRYABLE = (requests.ConnectionError, requests.Timeout)

#: Header asking POST /v1/traces for its compact answer (RFC 7240): the counts, and results
#: only for refused or tripping traces, all the reporter reads (~100x smaller per batch).
COMPACT = {"Prefer": "return=minimal"}


#: The longest Retry-After honoured; a router asking for more is asked again after this.
MAX_RETRY_AFTER_S = 300.0


class ApiError(Exception):
    """The API answered with an error: its status, its {"error": ...} body, its Retry-After."""

    def __init__(self, status: int, code: str, message: str, details: Any = None,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        #: Seconds the answer asked to wait before trying again (429, 503), if it said.
        self.retry_after = retry_after


def retry_after(response: requests.Response) -> float | None:
    """Seconds a `Retry-After` header asks to wait (delta-seconds or an HTTP date), capped."""
    raw = (response.headers.get("Retry-After") or "").strip()
    if not raw:
        return None
    if raw.isdigit():
        return min(float(raw), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError):
        return None
    return min(max(0.0, when - time.time()), MAX_RETRY_AFTER_S)


def bearer_token(token: str | None) -> str | None:
    """`token` as it goes in the Authorization header; InvalidToken if it cannot.

    The whitespace around it is dropped: a token read from a file keeps the
    file's final newline (or CR LF, from Windows) in `$(cat file)` or
    `open(...).read()`, and the router strips its own tokens the same way. A
    space or control character inside is refused, naming its position only:
    the token never appears in an error, a log line or a traceback.
    """
    if token is None:
        return None
    stripped = token.strip()
    for index, char in enumerate(stripped):
        if not ("!" <= char <= "~"):
            raise InvalidToken(
                f"the token has a space, control or non-ASCII character at position "
                f"{index + 1} of {len(stripped)}; a token is printable ASCII with no spaces "
                f"(was it pasted with a quote or line break inside?)", position=index + 1)
    return stripped or None


class ApiClient:
    """Calls rolegate's HTTP API with bounded, jittered retries on connection trouble."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 5.0,
        attempts: int = 5,
        max_delay: float = 30.0,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.attempts = attempts
        self.max_delay = max_delay
        # Checked before the session exists: nothing below ever sees a bad token.
        token = bearer_token(token)
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        #: path -> (prepared request, adapter, environment settings) for post_bytes().
        self._prepared: dict[str, tuple[requests.PreparedRequest, Any, dict[str, Any]]] = {}

    def _retrying(self) -> Retrying:
        no_wait = os.environ.get("ROLEGATE_RETRY_NO_WAIT") == "1"
        return Retrying(
            retry=retry_if_exception_type(RETRYABLE),
            stop=stop_after_attempt(self.attempts) | stop_after_delay(self.max_delay),
            # wait_exponential_jitter's `initial` is deprecated in tenacity 9 (a warning,
            # an error under our test settings); this sum is the same backoff in any version.
            wait=wait_none() if no_wait else wait_exponential(multiplier=0.1, max=5.0)
            + wait_random(0, 1),
            reraise=True,
        )

    def request(self, method: str, path: str, *, ok: tuple[int, ...] = (200, 201),
                **kwargs: Any) -> requests.Response:
        """Send one request (retried on connection errors); raise ApiError unless ok."""
        kwargs.setdefault("timeout", self.timeout)
        for attempt in self._retrying():
            with attempt:
                response = self.session.request(method, f"{self.url}{path}", **kwargs)
        if response.status_code not in ok:
            raise _api_error(response)
        return response

    def post_bytes(self, path: str, body: bytes, content_type: str = "application/json",
                   headers: Mapping[str, str] | None = None) -> requests.Response:
        """POST `body` to `path` and return the response, whatever its status.

        For a hot path (the trace reporter posts a batch many times a second):
        the request is prepared once per path and each call only sets the body
        and goes to the session's adapter, skipping what `Session.request` redoes
        every time (merging headers, cookies and the environment's proxy and CA
        settings, which are read once here), about half the CPU of a small POST.
        Redirects are not followed. Connection errors are retried as `request` does.
        `headers` join Content-Type on the path's first call (the request is prepared once).
        """
        found = self._prepared.get(path)
        if found is None:
            url = f"{self.url}{path}"
            template = self.session.prepare_request(requests.Request(
                "POST", url, headers={"Content-Type": content_type, **(headers or {})}))
            settings: dict[str, Any] = dict(
                self.session.merge_environment_settings(url, {}, None, None, None))
            found = (template, self.session.get_adapter(url), settings)
            self._prepared[path] = found
        template, adapter, settings = found
        for attempt in self._retrying():
            with attempt:
                prepared = template.copy()
                prepared.prepare_body(body, None)
                response: requests.Response = adapter.send(prepared, timeout=self.timeout,
                                                           **settings)
        return response

    def get(self, path: str, **kwargs: Any) -> Any:
        """GET `path` and return its JSON."""
        return self.request("GET", path, **kwargs).json()

    def post(self, path: str, body: Any = None, *, version: int | None = None,
             **kwargs: Any) -> Any:
        """POST JSON to `path` (with If-Match when `version` is given) and return its JSON."""
        headers = dict(kwargs.pop("headers", {}))
        if version is not None:
            headers["If-Match"] = str(version)
        return self.request("POST", path, json=body if body is not None else {},
                            headers=headers, **kwargs).json()

    def put(self, path: str, body: Any, *, version: int | None = None, **kwargs: Any) -> Any:
        """PUT JSON to `path` (with If-Match when `version` is given) and return its JSON."""
        headers = dict(kwargs.pop("headers", {}))
        if version is not None:
            headers["If-Match"] = str(version)
        return self.request("PUT", path, json=body, headers=headers, **kwargs).json()

    def close(self) -> None:
        """Close the pooled connections."""
        self.session.close()


def _api_error(response: requests.Response) -> ApiError:
    try:
        error = response.json().get("error", {})
    except ValueError:
        error = {}
    if not isinstance(error, dict):
        error = {}
    return ApiError(
        response.status_code,
        str(error.get("code", "http_error")),
        str(error.get("message", response.text[:500] or response.reason)),
        error.get("details"),
        retry_after(response),
    )
