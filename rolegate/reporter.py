"""Send traces to `POST /v1/traces` from a background thread, never blocking the agent.

`report()` only appends to a bounded in-memory queue; when the queue is full the
OLDEST trace is dropped and counted (the newest say most about the config now
serving). One daemon thread sends what is queued in batches, through ApiClient
(tenacity retries connection errors with backoff). A batch that still fails
(router down or answering 5xx) is kept and retried, with the SAME run ids, so a
batch the server stored but whose answer was lost is not counted twice: the
server is idempotent on `run_id`. `close()` flushes, bounded by `flush_timeout`.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests

from rolegate.http import ApiClient, ApiError
from rolegate.trace import Trace

log = logging.getLogger("rolegate.client")

TRACES_PATH = "/v1/traces"
#: Answers worth trying again later: the router or its Redis is having trouble.
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class ReportStats:
    """What became of the traces handed to `report()`."""

    #: Waiting in the queue or in the batch being sent.
    queued: int
    #: Accepted by the router (a duplicate run_id counts: the router has it).
    sent: int
    #: Pushed out of a full queue before they could be sent.
    dropped: int
    #: Of `sent`, the retries of a run the router already had (stored once).
    duplicates: int
    #: Refused by the router as invalid; logged with the reason.
    rejected: int
    #: Still unsent when close() gave up after flush_timeout.
    unsent: int
    #: Sending attempts that failed and were retried later.
    failed_attempts: int


class TraceReporter:
    """A bounded queue of traces and the thread that ships them in batches."""

    def __init__(
        self,
        api: ApiClient,
        *,
        max_queue: int = 10_000,
        batch_size: int = 200,
        flush_timeout: float = 10.0,
        retry_wait: float = 0.5,
    ) -> None:
        if max_queue < 1 or batch_size < 1:
            raise ValueError("max_queue and batch_size must be at least 1")
        self.api = api
        self.batch_size = batch_size
        self.flush_timeout = flush_timeout
        self.retry_wait = retry_wait
        self._queue: collections.deque[Trace] = collections.deque(maxlen=max_queue)
        self._condition = threading.Condition()
        self._in_flight = 0
        self._sent = 0
        self._dropped = 0
        self._rejected = 0
        self._duplicates = 0
        self._unsent = 0
        self._failed_attempts = 0
        self._closing = False
        self._closed = threading.Event()
        self._give_up_at = float("inf")
        self._thread: threading.Thread | None = None

    def report(self, trace: Trace | Mapping[str, Any]) -> None:
        """Queue one trace; a dict is validated here so a bad one fails in the caller."""
        item = trace if isinstance(trace, Trace) else Trace.model_validate(trace)
        with self._condition:
            if self._closing:
                raise RuntimeError("the client is closed; it no longer reports traces")
            if len(self._queue) == self._queue.maxlen:
                self._dropped += 1  # the deque pushes the oldest out on append
            self._queue.append(item)
            self._condition.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rolegate-client-report",
                                                daemon=True)
                self._thread.start()

    def stats(self) -> ReportStats:
        """A consistent copy of the counters."""
        with self._condition:
            return ReportStats(
                queued=len(self._queue) + self._in_flight, sent=self._sent,
                dropped=self._dropped, duplicates=self._duplicates, rejected=self._rejected,
                unsent=self._unsent,
                failed_attempts=self._failed_attempts,
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the queue is empty and nothing is in flight; False on timeout."""
        with self._condition:
            return self._condition.wait_for(
                lambda: not self._queue and not self._in_flight, timeout)

    def close(self) -> None:
        """Send what is queued (for up to flush_timeout), then stop the thread."""
        with self._condition:
            self._closing = True
            self._give_up_at = time.monotonic() + self.flush_timeout
            self._condition.notify_all()
            thread = self._thread
        self._closed.set()
        if thread is not None:
            # The thread gives up by itself at _give_up_at; the margin covers one
            # request already under way.
            thread.join(self.flush_timeout + self.api.timeout + 1.0)
        self.api.close()

    # -- the sending thread --------------------------------------------------

    def _run(self) -> None:
        batch: list[Trace] = []
        while True:
            with self._condition:
                if not batch:
                    self._condition.wait_for(lambda: bool(self._queue) or self._closing)
                    if not self._queue:
                        return  # closing, and everything was sent
                    take = min(self.batch_size, len(self._queue))
                    batch = [self._queue.popleft() for _ in range(take)]
                    self._in_flight = len(batch)
                elif self._closing and time.monotonic() >= self._give_up_at:
                    self._unsent += len(batch) + len(self._queue)
                    log.error("closing with %d traces unsent: the router did not take them",
                              len(batch) + len(self._queue))
                    self._queue.clear()
                    self._in_flight = 0
                    self._condition.notify_all()
                    return
            if self._send(batch):
                with self._condition:
                    self._in_flight = 0
                    self._condition.notify_all()
                batch = []
            else:
                with self._condition:
                    self._failed_attempts += 1
                    closing = self._closing
                    pause = min(self.retry_wait, max(0.0, self._give_up_at - time.monotonic()))
                if closing:
                    time.sleep(pause)
                else:
                    # close() cuts this pause short, so shutdown starts flushing at once.
                    self._closed.wait(pause)

    def _send(self, batch: list[Trace]) -> bool:
        """POST one batch; True when the router has decided on every trace in it."""
        body = {"traces": [t.model_dump(mode="json", exclude_none=True) for t in batch]}
        try:
            # 207: some traces refused (each result says why), the rest stored.
            answer = self.api.post(TRACES_PATH, body, ok=(200, 207))
        except (requests.ConnectionError, requests.Timeout) as exc:
            log.warning("sending %d traces failed, will retry: %s", len(batch), exc)
            return False
        except ApiError as exc:
            if exc.status in RETRY_STATUSES:
                log.warning("router answered %s to %d traces, will retry", exc.status, len(batch))
                return False
            # A refusal of the whole batch: retrying the same bytes cannot help.
            log.error("router refused %d traces: %s", len(batch), exc)
            with self._condition:
                self._rejected += len(batch)
            return True
        refused = _count(answer, "refused")
        with self._condition:
            self._rejected += refused
            self._duplicates += _count(answer, "duplicates")
            self._sent += len(batch) - refused
        if refused:
            reasons = [r.get("error", {}).get("message") for r in answer.get("results", ())
                       if isinstance(r, Mapping) and r.get("status") == "refused"]
            log.error("router refused %d of %d traces: %s", refused, len(batch), reasons[:5])
        return True


def _count(answer: Any, field: str) -> int:
    """A count from a `POST /v1/traces` answer (0 when absent)."""
    value = answer.get(field) if isinstance(answer, Mapping) else None
    return value if isinstance(value, int) else 0
