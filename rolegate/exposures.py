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

Each counter but the shadow's also numbers the runs it counts: run n of a
counter has the id ``stem + str(n)`` (`rolegate.run_ids`), its stem drawn when
the counter is made, so a drained row names the ids it counts as one range,
``"ids": {"stem", "from", "to"}`` (values from..to-1). A shadow run is the same
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
        #: Each counter's run-id stem (`rolegate.run_ids`); none for the shadow's.
        self._stems: dict[tuple[str, str, str, str], str] = {}
        self._drained: dict[tuple[str, str, str, str], int] = {}
        self._lock = threading.Lock()

    def counter(self, role: str, config: str, arm: str, epoch: str) -> itertools.count[int]:
        """The counter of (role, config, arm, epoch): call `next()` on it per assignment;
        its value is the run's number under the counter's `stem`."""
        key = (role, config, arm, epoch)
        found = self._counters.get(key)
        if found is None:
            with self._lock:
                found = self._counters.get(key)
                if found is None:
                    if arm != "shadow":
                        self._stems[key] = new_stem()
                    found = self._counters[key] = itertools.count()
        return found

    def stem(self, role: str, config: str, arm: str, epoch: str) -> str | None:
        """The run-id stem of the counter (made with it); None for the shadow's."""
        self.counter(role, config, arm, epoch)
        return self._stems.get((role, config, arm, epoch))

    def count(self, role: str, config: str, arm: str, epoch: str) -> str | None:
        """Count one assignment: its run id (None for a shadow run, which has none)."""
        number = next(self.counter(role, config, arm, epoch))
        stem = self._stems.get((role, config, arm, epoch))
        return None if stem is None else f"{stem}{number}"

    def drain(self, now: float) -> list[dict[str, Any]]:
        """Rows of what each counter gained since the last drain, in `now`'s time bucket."""
        bucket = int(now // BUCKET_S)
        rows = []
        with self._lock:
            for key, counter in list(self._counters.items()):
                value = _value(counter)
                gained = value - self._drained.get(key, 0)
                if gained > 0:
                    self._drained[key] = value
                    role, config, arm, epoch = key
                    row: dict[str, Any] = {"role": role, "config": config, "arm": arm,
                                           "epoch": epoch, "bucket": bucket, "count": gained}
                    stem = self._stems.get(key)
                    if stem is not None:
                        row["ids"] = {"stem": stem, "from": value - gained, "to": value}
                    rows.append(row)
        return rows

    def give_back(self, rows: list[dict[str, Any]]) -> None:
        """Count again rows a failed send did not deliver (the next drain sends them)."""
        with self._lock:
            for row in rows:
                key = (row["role"], row["config"], row["arm"], row["epoch"])
                self._drained[key] = self._drained.get(key, 0) - int(row["count"])


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
