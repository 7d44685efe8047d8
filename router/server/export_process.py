"""The OTLP exporter beside the router: `rolegate serve`'s master runs `rolegate export-otlp`.

Started by the gunicorn master (its `on_starting` hook, after the embedded Redis)
when ROLEGATE_EXPORT_OTLP_ENDPOINT is set, restarted when it dies, stopped with
the master. A process of its own, not a thread in a worker: a gevent worker runs
one thing at a time, and encoding a batch of spans there would hold up the
requests that worker serves; as its own process it costs ingest nothing but a
share of the CPU. One per router host; with several routers on one Redis the
export lease lets one of them export at a time.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from router.server.embedded import die_with_parent

#: Waits before restarting an exporter that exited, doubling while it keeps exiting.
FIRST_RESTART_S = 1.0
MAX_RESTART_S = 30.0
#: A run this long resets the restart wait.
HEALTHY_S = 60.0


class ExportProcess:
    """One `rolegate export-otlp` child, restarted whenever it exits until `stop`."""

    def __init__(self, log: logging.Logger | Any) -> None:
        self.log = log
        # One lease holder name for every exporter this master starts: one restarted
        # after a crash renews the lease its predecessor held at once, instead of
        # waiting out its 30 s. Never two at once: a new one starts after the old exited.
        holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.argv = [sys.executable, "-m", "router.cli", "export-otlp", "--holder", holder]
        self.process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._guard = threading.Lock()

    def start(self) -> None:
        """Spawn the exporter and a daemon thread that restarts it when it exits."""
        self._spawn()
        threading.Thread(target=self._watch, daemon=True, name="rolegate-export-supervisor").start()

    def _spawn(self) -> None:
        with self._guard:
            if not self._stopping.is_set():
                # Its log lines go where the master's go (inherited stdout/stderr). Its own
                # session: a Ctrl-C reaches the master, which stops it in order; and it
                # gets SIGTERM if the master dies outright, instead of exporting on alone.
                self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                                start_new_session=True,
                                                preexec_fn=die_with_parent)

    def _watch(self) -> None:
        wait = FIRST_RESTART_S
        while not self._stopping.is_set():
            process = self.process
            if process is None:
                return
            started = time.monotonic()
            code = process.wait()
            if self._stopping.is_set():
                return
            wait = FIRST_RESTART_S if time.monotonic() - started > HEALTHY_S else min(wait * 2, MAX_RESTART_S)
            self.log.error("the OTLP exporter exited (status %s); restarting it in %.0f s",
                           code, wait)
            if self._stopping.wait(wait):
                return
            self._spawn()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the exporter (SIGTERM: it ends its current try and releases its lease)."""
        self._stopping.set()
        with self._guard:
            process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
