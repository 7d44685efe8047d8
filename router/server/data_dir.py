"""One router per data directory: the gunicorn master holds a lock on it for its lifetime.

`ROLEGATE_DATA_DIR` holds a router's kept binding table
(router.server.kept_file), its Prometheus multiprocess files (which the master
empties as it starts) and, without REDIS_URL, the embedded Redis. A second
router given the same directory would serve and overwrite the first one's
table and delete its live metrics files, whose counters then read wrong. So
the master takes an exclusive `flock` on `<dir>/router.lock` before anything
else, and a second one refuses to start, naming the holder. The lock goes with
the process (the workers inherit it), so a crash never leaves it held.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

#: The lock file, in the data directory (and in a separate metrics directory).
LOCK_FILE = "router.lock"

# Held open for the life of the master (a closed descriptor drops the lock).
_held: list[int] = []


class DataDirInUse(RuntimeError):
    """Another live router holds the directory (gunicorn prints it and exits 1)."""


def claim(directory: Path, what: str = "ROLEGATE_DATA_DIR") -> None:
    """Hold `directory` for this process; DataDirInUse naming the holder if another does."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown process"
        os.close(fd)
        raise DataDirInUse(
            f"{what} {directory} is in use by another router ({holder}): two routers "
            "sharing it would overwrite each other's kept binding table and delete each "
            f"other's metrics files. Give each router its own {what}") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    _held.append(fd)


def claim_for_router(data_dir: str, metrics_dir: str | None) -> None:
    """Claim the data directory, and the metrics directory when it lies outside it."""
    base = Path(data_dir).resolve()
    claim(base)
    if metrics_dir:
        metrics = Path(metrics_dir).resolve()
        if base != metrics and base not in metrics.parents:
            claim(metrics, "PROMETHEUS_MULTIPROC_DIR")
