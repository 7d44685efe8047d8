"""Exposure counting: how many runs each (role, config, arm, stage epoch) was assigned.

Shared by the SDK (its in-process resolves) and the router (its HTTP resolves):
`Exposures.counter(...)` hands out one `itertools.count` per (role, config, arm,
epoch), created once when a snapshot entry is built, so counting an assignment
on the hot path is a single `next()` (atomic in CPython: no lock, ~30 ns).
`drain(now)` reads each counter's value, and returns what grew since the last
drain as rows attributed to the time bucket of `now`: a drain every second or
so keeps each count within a second of its bucket.

The epoch is the stage's start as the window keys write it (`epoch_of`), so a
count lands in the same stage window as the runs it assigned.

Each counter but the shadow's also numbers the runs it counts: a run's id is
``run_stem + str(value)`` (`rolegate.run_ids`), one stem per `Exposures`, each
counter counting in a block of numbers of its own, so a drained row names the
ids it counts as one range, ``"ids": {"stem", "from", "to"}`` (values from..to-1). A shadow run is the same
job run again on the shadow config: it has no id of its own, and its arm keeps
count-only matching.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from rolegate.run_ids import new_stem

#: Seconds per time bucket (gatekeeper.stats.concurrent.BUCKET_S: the buckets the
#: report-rate test compares; the SDK may not import the service's packages).
BUCKET_S = 30
#: Where counts are sent (the router adds them to its exposure hashes).
EXPOSURES_PATH = "/v1/exposures"
#: Run ids one POST may name (the router refuses more): longer drains go in several.
MAX_IDS_PER_POST = 100_000
#: Each counter's block of run numbers (`Exposures.counter`): 10**12 runs a counter, and
#: a million counters before the numbers reach the exposure rows' bound of 10**18.
RUNS_PER_COUNTER = 10**12
def epoch_of(since: float | None) -> str:
    """A stage's window epoch from its start (as the trace store's keys write it)."""
    return "0" if since is None else f"{since:.6f}"


def _value(counter: itertools.count[int]) -> int:
    # An itertools.count's next value, read without advancing it.
    return int(repr(counter)[6:-1])


class Exposures:
    """Per (role, config, arm, epoch) counters, and what they gained since the last drain."""

    def __init__(self) -> None:
        self._counters: dict[tuple[str, str, str, str], itertools.count[int]] = {}
        #: This instance's run-id stem (`rolegate.run_ids`), one for every counter: each
        #: counter numbers its runs from its own block of RUNS_PER_COUNTER, so run n of
        #: counter k is ``stem + str(k * RUNS_PER_COUNTER + n)``, and no answer or role
        #: holds a stem of its own (the SDK's snapshot stays as small as it was).
        self.run_stem = new_stem()
        self._blocks = itertools.count()
        self._drained: dict[tuple[str, str, str, str], int] = {}
        self._lock = threading.Lock()

    def counter(self, role: str, config: str, arm: str, epoch: str) -> itertools.count[int]:
        """The counter of (role, config, arm, epoch): call `next()` on it per assignment;
        its value is the run's number under `run_stem` (the shadow's is no run's)."""
        key = (role, config, arm, epoch)
        found = self._counters.get(key)
        if found is None:
            with self._lock:
                found = self._counters.get(key)
                if found is None:
                    start = next(self._blocks) * RUNS_PER_COUNTER
                    found = self._counters[key] = itertools.count(start)
        return found

    def count(self, role: str, config: str, arm: str, epoch: str) -> str | None:
        """Count one assignment: its run id (None for a shadow run, which has none)."""
        number = next(self.counter(role, config, arm, epoch))
        return None if arm == "shadow" else f"{self.run_stem}{number}"

    def drain(self, now: float) -> list[dict[str, Any]]:
        """Rows of what each counter gained since the last drain, in `now`'s time bucket."""
        bucket = int(now // BUCKET_S)
        rows = []
        with self._lock:
            for key, counter in list(self._counters.items()):
                value = _value(counter)
                # Never drained yet: its block's first number (nothing kept per counter).
                first = value - value % RUNS_PER_COUNTER
                gained = value - self._drained.get(key, first)
                if gained > 0:
                    self._drained[key] = value
                    role, config, arm, epoch = key
                    row: dict[str, Any] = {"role": role, "config": config, "arm": arm,
                                           "epoch": epoch, "bucket": bucket, "count": gained}
                    if arm != "shadow":
                        row["ids"] = {"stem": self.run_stem, "from": value - gained,
                                      "to": value}
                    rows.append(row)
        return rows

    def give_back(self, rows: list[dict[str, Any]]) -> None:
        """Count again rows a failed send did not deliver (the next drain sends them)."""
        with self._lock:
            for row in rows:
                key = (row["role"], row["config"], row["arm"], row["epoch"])
                self._drained[key] = self._drained[key] - int(row["count"])


def batches(rows: list[dict[str, Any]],
            most: int = MAX_IDS_PER_POST) -> list[list[dict[str, Any]]]:
    """`rows` in posts naming at most `most` run ids each, a longer range split into rows of
    its own (each with its part's count), in order: what a failed post gives back is the
    later part of each counter's drain."""
    posts: list[list[dict[str, Any]]] = [[]]
    named = 0
    for row in rows:
        ids = row.get("ids")
        if ids is None:
            posts[-1].append(row)
            continue
        start, stop = ids["from"], ids["to"]
        while start < stop:
            if named == most:
                posts.append([])
                named = 0
            part = min(stop, start + most - named)
            posts[-1].append({**row, "count": part - start,
                              "ids": {"stem": ids["stem"], "from": start, "to": part}})
            named += part - start
            start = part
    return [post for post in posts if post]


class Sender:
    """A daemon thread that sends what `exposures` gained, every `interval` seconds.

    `post(rows)` delivers one batch (POST /v1/exposures); a failed send gives the
    rows back, so the next one carries them. `close()` sends what is left.
    """

    def __init__(self, exposures: Exposures, post: Any, clock: Any,
                 interval: float = 1.0) -> None:
        self.exposures = exposures
        self.post = post
        self.clock = clock
        self.interval = interval
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rolegate-exposures",
                                        daemon=True)
        self._thread.start()

    def send(self) -> None:
        """Drain and post once now (in posts of at most MAX_IDS_PER_POST run ids)."""
        rows = self.exposures.drain(self.clock())
        posts = batches(rows)
        for n, batch in enumerate(posts):
            try:
                self.post(batch)
            except Exception:  # noqa: BLE001 - any failure: keep the counts for the next send
                self.failures += 1
                for unsent in posts[n:]:
                    self.exposures.give_back(unsent)
                return

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.send()

    def close(self, timeout: float = 1.0) -> None:
        """Stop the thread and send what is left."""
        self._stop.set()
        self._thread.join(timeout)
        self.send()
