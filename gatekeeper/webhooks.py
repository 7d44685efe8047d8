"""Webhook events: every stage change, rollback, alarm and refused action, as JSON.

`Notifier.emit()` only enqueues; one background thread delivers each event to
every URL with bounded, jittered retries, so a slow or dead receiver never
blocks a tick. Events that cannot be queued (queue full) are counted and logged,
not waited for. Each endpoint gets the event in its own shape (rolegate's JSON, Slack,
Teams, Discord or a generic one) and only at or above its severity (`gatekeeper.alerts`).
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import requests

from gatekeeper.alerts import Endpoint, parse_endpoint, render

log = logging.getLogger("rolegate.webhooks")

#: Event kinds receivers can rely on.
STAGE_CHANGE = "stage_change"
ROLLBACK = "rollback"
ALARM = "alarm"
REFUSED = "refused"
#: A step asking for approval passed its gate and waits for an operator.
APPROVAL_NEEDED = "approval_needed"
#: gate.responses held the rollout (the gatekeeper paused it for a human).
HOLD_EVENT = "hold"
#: gate.responses only warns on a rule that would have rolled back.
WARNING = "warning"

QUEUE_SIZE = 1000


def parse_urls(spec: str | Iterable[str] | None) -> list[str]:
    """Comma-separated URLs (ROLEGATE_WEBHOOKS), or several specs, as a clean list."""
    if spec is None:
        return []
    parts = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in s.split(",")]
    return [p.strip() for p in parts if p.strip()]


class Notifier:
    """Delivers events to webhook endpoints from a background thread.

    `urls` are endpoint specs (`[format[.severity]=]url`, see `gatekeeper.alerts`) or
    Endpoints; `public_url` is the router's address as people reach it, for the link to
    the role's page in the formatted messages.
    """

    def __init__(self, urls: Iterable[str | Endpoint], *, attempts: int = 4,
                 timeout: float = 3.0, backoff: float = 0.2, source: str = "gatekeeper",
                 public_url: str | None = None) -> None:
        self.endpoints = [u if isinstance(u, Endpoint) else parse_endpoint(u) for u in urls]
        self.urls = [e.url for e in self.endpoints]
        self.public_url = public_url
        self.attempts = attempts
        self.timeout = timeout
        self.backoff = backoff
        self.source = source
        self.dropped = 0
        self.delivered = 0
        self.failed = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(QUEUE_SIZE)
        self._session = requests.Session()
        self._thread: threading.Thread | None = None
        if self.urls:
            self._thread = threading.Thread(target=self._work, name="webhooks", daemon=True)
            self._thread.start()

    def emit(self, kind: str, role: str, **payload: Any) -> dict[str, Any]:
        """Queue one event for delivery; never blocks. Returns the event."""
        event = {"id": uuid.uuid4().hex, "kind": kind, "role": role, "time": time.time(),
                 "source": self.source, **payload}
        if not self.urls:
            return event
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1
            log.warning("webhook queue full; dropped %s event for %s", kind, role)
        return event

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued (waiting at most `timeout`), then stop the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None
        self._session.close()

    def _work(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            for endpoint in self.endpoints:
                if endpoint.wants(event):
                    self._deliver(endpoint.url, event,
                                  render(event, endpoint.format, self.public_url))

    def _deliver(self, url: str, event: dict[str, Any], body: dict[str, Any]) -> None:
        for attempt in range(self.attempts):
            try:
                with self._session.post(url, json=body, timeout=self.timeout) as response:
                    # A 4xx is the receiver refusing this event; retrying won't change it.
                    if response.status_code < 500:
                        if response.ok:
                            self.delivered += 1
                        else:
                            self.failed += 1
                            log.warning("webhook %s refused %s: %s", url, event["kind"],
                                        response.status_code)
                        return
            except requests.RequestException as exc:
                log.info("webhook %s attempt %d failed: %s", url, attempt + 1, exc)
            time.sleep(self.backoff * (2 ** attempt) * random.uniform(0.5, 1.5))
        self.failed += 1
        log.warning("webhook %s gave up on %s event after %d attempts", url, event["kind"],
                    self.attempts)
