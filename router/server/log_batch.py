"""Resolve (and single-trace ingest) log lines written in batches, off the request path.

A resolve is the one call every agent makes on every job, and writing its two
JSON lines through `logging` on the request thread cost most of the resolve
(a record, a handler lock and a write syscall each time). Here a resolve only
appends its already encoded lines to a list; a daemon thread per worker process
hands whatever has gathered to the events logger as one record every
FLUSH_INTERVAL_S, so the lines, their order and their format are unchanged and
a thousand resolves cost one write. The request line of a single trace
stored by the ingest fast path (router.api.ingest_fast), the other call every
agent makes per job, goes the same way. Lines of other requests (decisions,
writes) are still written at once: they are rare and each matters.

The price: resolve lines show up to FLUSH_INTERVAL_S late, and a worker killed
with SIGKILL loses at most that much of them (a normal exit flushes).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import deque

#: How long a resolve line may wait before it is written.
FLUSH_INTERVAL_S = 0.1
#: A batch this long is written without waiting for the interval.
MAX_PENDING = 2048


class LineBatcher:
    """Gathers text lines and writes them to `logger` in batches from its own thread."""

    def __init__(self, logger: logging.Logger, interval: float = FLUSH_INTERVAL_S) -> None:
        self.logger = logger
        self.interval = interval
        self._pending: deque[str] = deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._owner_pid: int | None = None

    def add(self, text: str) -> None:
        """Queue `text` (one or more lines) to be written within the interval."""
        if self._owner_pid != os.getpid():
            self._start()
        pending = self._pending
        pending.append(text)  # deque.append is thread-safe: no lock on the hot path
        if len(pending) >= MAX_PENDING:
            self._wake.set()

    def flush(self) -> None:
        """Write everything queued so far, now, as one record."""
        with self._lock:
            pending = self._pending
            # popleft, not a swap of lists: a line appended meanwhile is never lost.
            batch = [pending.popleft() for _ in range(len(pending))]
            if batch:
                self.logger.info("\n".join(batch))

    def _start(self) -> None:
        # Started in the process that serves: gunicorn forks workers after the
        # app is built, and a thread started before the fork would not exist.
        with self._lock:
            if self._owner_pid == os.getpid():
                return
            self._pending.clear()  # lines queued before a fork belong to the parent
            self._owner_pid = os.getpid()
            threading.Thread(target=self._run, name="rolegate-log-batch", daemon=True).start()
            atexit.register(self.flush)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            try:
                self.flush()
            except Exception:  # a logging failure must not kill the writer
                logging.getLogger("rolegate").exception("writing resolve log lines failed")
