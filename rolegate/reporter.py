"""Send traces to `POST /v1/traces` from a background thread, never blocking the agent.

Nothing is lost quietly; every trace handed to `report()` ends up counted in
exactly one of `sent`, `dropped`, `rejected` or `unsent` (`ReportStats`).

- `report()` validates and ENCODES the trace in the caller's thread, so a bad
  trace raises there and the queue only ever holds JSON bytes the sender can
  send. A value JSON cannot represent (an object of your own class, bytes that
  are not UTF-8) is the one documented coercion: it is sent as its `repr()`
  (bytes as URL-safe base64), logged and counted in `coerced`.
- One daemon thread sends batches sized by bytes (`max_batch_bytes`, well under
  the router's body limit) and by count. A batch waits up to `linger` seconds
  for more traces to join it (a POST costs the agent's process far more CPU
  than adding a trace to one), and goes out at once when it is full or when
  `flush()` or `close()` asks. Its loop cannot die: an unexpected
  error is logged, counted in `sender_errors`, the batch it was handling is
  counted `unsent`, and the next batch goes out.
- Connection errors, timeouts and 5xx keep the batch and retry it with the SAME
  run ids (the router is idempotent on `run_id`), backing off exponentially;
  `429` waits its `Retry-After`.
- `413`: the batch is split in half and each half resent, and later batches
  are made smaller; a single trace over the limit is refused on its own.
- Any other 4xx refuses only the traces the answer names (`results[].status ==
  "refused"`, each reason logged and counted by code in `rejections`); a 4xx
  that names none is bisected down to the one trace it refuses, except a
  refusal of the request itself (401, 403: a bad token), which refuses them all.
- `close()` is bounded: it returns by its deadline even when the router hangs.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import requests
from pydantic_core import from_json

from rolegate.encoding import encode
from rolegate.http import COMPACT, ApiClient, retry_after
from rolegate.report_stats import ReportStats
from rolegate.trace import Trace

# ReportStats lives in rolegate.report_stats; importing it from here keeps working.
__all__ = ["MIN_BATCH_BYTES", "Encoded", "ReportStats", "TraceReporter"]

log = logging.getLogger("rolegate.client")

TRACES_PATH = "/v1/traces"
#: Answers worth trying again later: the router or its Redis is having trouble.
RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
#: Refusals of the request, not of its traces: every trace in it would be refused alike.
REQUEST_REFUSALS = frozenset({401, 403, 404, 405})
#: The floor under which a 413 never shrinks batches (a bigger trace is sent alone).
MIN_BATCH_BYTES = 16 * 1024
_OPEN, _CLOSE, _COMMA = b'{"traces":[', b"]}", b","


class Encoded(NamedTuple):
    """One trace ready to send: its run id and its JSON (a tuple: made once per report)."""

    run_id: str
    body: bytes


class TraceReporter:
    """A bounded queue of encoded traces and the thread that ships them in batches."""

    def __init__(
        self,
        api_factory: Callable[[], ApiClient],
        *,
        max_queue: int = 10_000,
        batch_size: int = 200,
        max_batch_bytes: int = 1024 * 1024,
        flush_timeout: float = 10.0,
        retry_wait: float = 0.5,
        max_retry_wait: float = 10.0,
        linger: float = 0.1,
    ) -> None:
        if max_queue < 1 or batch_size < 1:
            raise ValueError("max_queue and batch_size must be at least 1")
        if not 0.0 <= linger <= 60.0:
            raise ValueError("linger must be between 0 and 60 seconds")
        if max_batch_bytes < MIN_BATCH_BYTES:
            raise ValueError(f"max_batch_bytes must be at least {MIN_BATCH_BYTES}")
        self._api_factory = api_factory
        self.api = api_factory()
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.max_batch_bytes = max_batch_bytes
        self.flush_timeout = flush_timeout
        self.retry_wait = retry_wait
        self.max_retry_wait = max_retry_wait
        #: Seconds a batch waits for more traces before it goes out (0: at once).
        self.linger = linger
        self._reset()

    def _reset(self) -> None:
        """Fresh state: at construction, and in a forked child (whose threads did not survive)."""
        self._queue: collections.deque[Encoded] = collections.deque(maxlen=self.max_queue)
        #: Bytes of JSON in the queue, so a batch that fills max_batch_bytes goes out at once.
        self._queued_bytes = 0
        #: flush() calls waiting: while any waits, a batch goes out without lingering.
        self._flushing = 0
        #: When the oldest queued trace was queued (monotonic), for the linger.
        self._first_at = 0.0
        self._condition = threading.Condition()
        #: Batches taken from the queue and not yet decided on (a 413 splits one in two).
        self._pending: list[list[Encoded]] = []
        self._counts: collections.Counter[str] = collections.Counter()
        self._rejections: collections.Counter[str] = collections.Counter()
        self._closing = False
        self._abandoned = False
        self._wake = threading.Event()
        self._failures = 0
        self._give_up_at = float("inf")
        self._thread: threading.Thread | None = None

    # -- the caller's side ---------------------------------------------------

    def report(self, trace: Trace | Mapping[str, Any]) -> None:
        """Validate and encode one trace here, then queue it; never blocks on the network.

        A dict that is not a valid trace raises `pydantic.ValidationError` (a
        ValueError) in the caller, and nothing is queued.
        """
        item = trace if isinstance(trace, Trace) else Trace.model_validate(trace)
        body, coerced = encode(item)
        if coerced:
            log.warning("trace %s held a value JSON cannot encode; sent as its repr()",
                        item.run_id)
        with self._condition:
            if self._closing:
                raise RuntimeError("the client is closed; it no longer reports traces")
            if coerced:
                self._counts["coerced"] += 1
            queue = self._queue
            if len(queue) == self.max_queue:
                self._queued_bytes -= len(queue[0].body)  # the deque pushes it out on append
                self._counts["dropped"] += 1
                if self._counts["dropped"] == 1 or self._counts["dropped"] % 1000 == 0:
                    log.error("trace queue full (%d): dropped %d oldest traces so far",
                              self.max_queue, self._counts["dropped"])
            queue.append(Encoded(item.run_id, body))
            self._queued_bytes += len(body)
            if len(queue) == 1:
                self._first_at = time.monotonic()  # the batch's linger counts from here
            # Wake the sender only for a full batch, or a first trace when it does not
            # linger (a lingering one ticks every `linger`): waking it amid an agent's
            # runs cost them about 20 us each in bench.integrations.
            if self._full() or (len(queue) == 1 and self.linger == 0):
                self._condition.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rolegate-client-report",
                                                daemon=True)
                self._thread.start()

    def stats(self) -> ReportStats:
        """A consistent copy of the counters."""
        with self._condition:
            counts = self._counts
            return ReportStats(
                queued=len(self._queue) + sum(len(b) for b in self._pending),
                sent=counts["sent"], dropped=counts["dropped"],
                duplicates=counts["duplicates"], rejected=counts["rejected"],
                unsent=counts["unsent"], failed_attempts=counts["failed_attempts"],
                coerced=counts["coerced"], sender_errors=counts["sender_errors"],
                splits=counts["splits"], rejections=dict(self._rejections),
            )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the queue is empty and nothing is in flight; False on timeout."""
        with self._condition:
            # While a flush waits, the sender sends without lingering.
            self._flushing += 1
            self._condition.notify_all()
            try:
                return self._condition.wait_for(
                    lambda: not self._queue and not self._pending, timeout)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued for up to `timeout` (default flush_timeout), then stop.

        Returns by the deadline whatever the router does; what is still queued
        or in flight then is counted `unsent` and logged.
        """
        bound = self.flush_timeout if timeout is None else max(0.0, timeout)
        deadline = time.monotonic() + bound
        with self._condition:
            if self._closing and self._thread is None:
                return
            self._closing = True
            self._give_up_at = deadline
            self._condition.notify_all()
            thread = self._thread
        self._wake.set()  # cut a backoff pause short: flushing starts at once
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._condition:
            left = len(self._queue) + sum(len(b) for b in self._pending)
            if left:
                # The thread is stuck in a request (a hung router): abandon it; it
                # changes no counter from here on.
                self._abandoned = True
                self._counts["unsent"] += left
                self._queue.clear()
                self._queued_bytes = 0
                self._pending.clear()
                log.error("closing with %d traces unsent: the router did not take them "
                          "within %.1fs", left, bound)
                self._condition.notify_all()
            self._thread = None
        if thread is None or not thread.is_alive():
            self.api.close()

    def after_fork_in_child(self) -> None:
        """Start over in a forked child: its queue belongs to the parent, its threads are gone.

        The parent's connections are not closed here (their sockets are the
        parent's too); the child opens its own.
        """
        self.api = self._api_factory()
        self._reset()

    # -- the sending thread --------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                if not self._step():
                    return
            except Exception:  # the loop must outlive any one batch: logged and counted
                log.exception("the trace sender hit an unexpected error; its batch is lost, "
                              "the next one goes out")
                with self._condition:
                    if self._abandoned:
                        return
                    self._counts["sender_errors"] += 1
                    if self._pending:
                        self._counts["unsent"] += len(self._pending.pop())
                    self._condition.notify_all()
                self._pause(self.retry_wait)

    def _step(self) -> bool:
        """Send one batch (or wait for one); False when the thread should end."""
        with self._condition:
            if self._abandoned:
                return False
            if not self._pending:
                if self.linger > 0:
                    self._linger()
                else:
                    self._condition.wait_for(lambda: bool(self._queue) or self._closing)
                if not self._queue:
                    return False  # closing, and everything was sent
                self._pending.append(self._take())
            elif self._closing and time.monotonic() >= self._give_up_at:
                return False  # close() counts what is left
            batch = self._pending[-1]
        wait = self._send(batch)
        if wait is not None:
            with self._condition:
                self._counts["failed_attempts"] += 1
                pause = min(wait, max(0.0, self._give_up_at - time.monotonic()))
            self._pause(pause)
        return True

    def _linger(self) -> None:
        """Wait (holding the condition) until a batch should go: `linger` after its first
        trace, or at once when it is full, flushed or the reporter is closing.

        With nothing queued it waits `linger` at a time: report() does not wake it.
        """
        while not self._closing:
            if self._queue:
                if self._flushing > 0 or self._full():
                    return
                wait = self._first_at + self.linger - time.monotonic()
                if wait <= 0:
                    return
            else:
                wait = self.linger
            self._condition.wait(wait)

    def _take(self) -> list[Encoded]:
        """The next batch from the queue: at most batch_size traces and max_batch_bytes."""
        queue = self._queue
        batch = [queue.popleft()]
        size = len(_OPEN) + len(_CLOSE) + len(batch[0].body)
        while queue and len(batch) < self.batch_size:
            extra = len(queue[0].body) + 1
            if size + extra > self.max_batch_bytes:
                break
            batch.append(queue.popleft())
            size += extra
        self._queued_bytes -= size - len(_OPEN) - len(_CLOSE) - (len(batch) - 1)
        return batch

    def _full(self) -> bool:
        """Whether the queue holds a whole batch (by count or by bytes): no reason to wait."""
        return (len(self._queue) >= self.batch_size
                or self._queued_bytes + len(_OPEN) + len(_CLOSE) + len(self._queue)
                > self.max_batch_bytes)

    def _pause(self, seconds: float) -> None:
        self._wake.clear()
        if seconds > 0:
            self._wake.wait(seconds)

    def _send(self, batch: list[Encoded]) -> float | None:
        """POST one batch and settle it; the seconds to wait before retrying, or None."""
        body = _OPEN + _COMMA.join([item.body for item in batch]) + _CLOSE
        try:
            response = self.api.post_bytes(TRACES_PATH, body, headers=COMPACT)
        except (requests.ConnectionError, requests.Timeout) as exc:
            log.warning("sending %d traces failed, will retry: %s", len(batch), exc)
            return self._backoff()
        status = response.status_code
        if status in (200, 207):
            self._settle(batch, _json(response))
            return None
        if status in RETRY_STATUSES:
            log.warning("router answered %s to %d traces, will retry", status, len(batch))
            asked = retry_after(response) if status in (429, 503) else None
            return asked if asked is not None else self._backoff()
        if status == 413:
            self._too_large(batch, len(body))
            return None
        answer = _json(response)
        found = answer.get("error")
        error: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        if isinstance(answer.get("results"), list) and len(answer["results"]) == len(batch):
            self._settle(batch, answer)  # a 422: every trace refused, each with its reason
        elif len(batch) > 1 and status not in REQUEST_REFUSALS:
            # A refusal that names no trace: halve until it does, so good traces go through.
            self._split(batch)
        else:
            # One trace left, or the request itself refused (a bad token refuses every
            # trace alike: halving would only send more requests to refuse).
            self._reject(batch, str(error.get("code") or f"http_{status}"),
                         str(error.get("message") or response.reason))
        return None

    def _backoff(self) -> float:
        self._failures += 1
        delay: float = self.retry_wait * 2.0 ** min(self._failures - 1, 16)
        return min(self.max_retry_wait, delay)

    def _too_large(self, batch: list[Encoded], size: int) -> None:
        if len(batch) == 1:
            self._reject(batch, "too_large",
                         f"a {size}-byte trace is over the router's body limit")
            return
        # Remember the lesson, so later batches fit at the first try.
        self.max_batch_bytes = max(MIN_BATCH_BYTES, min(self.max_batch_bytes, size // 2))
        log.warning("router refused a %d-byte batch as too large; splitting it, batches "
                    "now at most %d bytes", size, self.max_batch_bytes)
        self._split(batch)

    def _split(self, batch: list[Encoded]) -> None:
        half = len(batch) // 2
        with self._condition:
            if self._abandoned:
                return
            self._counts["splits"] += 1
            self._pending.pop()
            # A stack: the first half goes out next, then the second.
            self._pending += [batch[half:], batch[:half]]

    def _reject(self, batch: list[Encoded], code: str, message: str) -> None:
        log.error("router refused %d traces (%s): %s; run ids %s", len(batch), code, message,
                  [item.run_id for item in batch[:5]])
        self._finish(sent=0, duplicates=0, rejected={code: len(batch)})

    def _settle(self, batch: list[Encoded], answer: Mapping[str, Any]) -> None:
        """Count a batch the router decided on: each refused trace with its reason."""
        self._failures = 0
        rejected: collections.Counter[str] = collections.Counter()
        reasons = []
        for result in answer.get("results") or ():
            if isinstance(result, Mapping) and result.get("status") == "refused":
                found = result.get("error")
                error: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
                rejected[str(error.get("code") or "refused")] += 1
                reasons.append((result.get("run_id"), error.get("message")))
        if reasons:
            log.error("router refused %d of %d traces: %s", len(reasons), len(batch),
                      reasons[:5])
        duplicates = answer.get("duplicates")
        self._finish(sent=len(batch) - sum(rejected.values()),
                     duplicates=duplicates if isinstance(duplicates, int) else 0,
                     rejected=rejected)

    def _finish(self, *, sent: int, duplicates: int, rejected: Mapping[str, int]) -> None:
        with self._condition:
            if self._abandoned:
                return
            self._pending.pop()
            self._counts["sent"] += sent
            self._counts["duplicates"] += duplicates
            self._counts["rejected"] += sum(rejected.values())
            self._rejections.update(rejected)
            self._condition.notify_all()


def _json(response: requests.Response) -> dict[str, Any]:
    """The answer's JSON object, or {} when it has none."""
    try:
        # pydantic-core's parser: the answer lists every trace of a batch (~48 KB for 200).
        body = from_json(response.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
