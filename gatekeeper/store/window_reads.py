"""Reading the stage windows back: each (config, arm)'s window, and its reporters' own.

`TraceStore` takes these reads from `WindowReads` (they share its connection
and the read script). Each read is one atomic `READ_SCRIPT` call per (config,
arm), all pipelined in one round trip: the window hash, its pending increments
(`gatekeeper.store.window_fold`), its reporters and the asked-for reporters'
windows, so no increment is missed or counted twice.

The gate view's read (`stage_windows`) is the one that has to be quick: a
100,000-run stage window holds some 20,000 fields (mostly the concurrent test's
per-bucket cells). It reads each window hash once, in one MULTI/EXEC of plain
commands (atomic as the script is, at a third of its cost in Redis), and of
each reporter's window only the `EVIDENCE` fields the view shows per reporter,
unless whole reporters' windows are asked for (the policy names
`trusted_reporters`, whose sum is the arm's window: then the window hash itself
is not read). The reporter names come from the last read of that window, so a
steady view costs one round trip; a reporter that appeared since costs a
second.

Each window's long-closed cells are kept apart in its closed-cells hash
(`gatekeeper.store.window_closed`), which `stage_windows` reads only by its id
while it holds the cells of that id, and fills, moving the cells of buckets
long closed, once a window holds `MOVE_AT` of them. Every read adds them to
the window.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.commands.core import Script

from bindings.connection import Connection
from bindings.errors import Conflict
from bindings.store import _redis_errors
from gatekeeper.stats.concurrent import closed_before
from gatekeeper.store import window_closed
from gatekeeper.store.trace_keys import (
    closed_key,
    pending_key,
    reporter_window_key,
    reporters_key,
    window_key,
)
from gatekeeper.store.window_closed import (
    GEN,
    MOVE_AT,
    MOVE_AT_MOST,
    ClosedCells,
    movable,
    new_gen,
)
from gatekeeper.store.window_fold import READ_SCRIPT, pending_counts
from gatekeeper.window import CLASHES, WindowStats

LOG = logging.getLogger(__name__)
#: Reads before giving up on reporters that keep appearing under a concurrent ingest.
ATTEMPTS = 4
#: What the gate view shows of each reporter (`view.arms`): its n, pass and
#: forbidden-call rates, and its clashes.
EVIDENCE = ("n", "passes", "forbidden", CLASHES)
#: Windows whose reporter names are remembered (then forgotten all at once).
REMEMBERED = 1_000
#: Windows whose closed cells are kept (then forgotten all at once): some 13,000 cells each
#: at 1 job/s over 100,000 runs.
REMEMBERED_CLOSED = 64

#: Per (config, arm): the arm's window (None when not read) and each reporter's.
StageWindows = tuple[WindowStats | None, dict[str, WindowStats]]


class WindowReads:
    """The window reads of `TraceStore`, which sets `connection` and `_read` (READ_SCRIPT)."""

    connection: Connection
    _read: Script
    _move: Script
    #: (role, config, arm, epoch) -> the closed cells the last read of that window found.
    _closed_cells: dict[tuple[str, str, str, str], ClosedCells]
    #: (role, config, arm, epoch) -> the reporter names the last read found.
    _reporters_seen: dict[tuple[str, str, str, str], tuple[str, ...]]

    def window(self, role: str, config: str, arm: str, epoch: str) -> WindowStats:
        """The running aggregate of one (role, config, arm) over one stage."""
        return self.windows(role, [(config, arm)], epoch)[0]

    def windows(self, role: str, pairs: Iterable[tuple[str, str]],
                epoch: str) -> list[WindowStats]:
        """Several (config, arm) aggregates over one stage, in one round trip."""
        reads = self._read_windows(role, [(config, arm, ()) for config, arm in pairs], epoch)
        return [WindowStats(_plus(_plus(_fields(read[0]), _fields(read[3], GEN)),
                                  pending_counts(read[1])[0]))
                for read in reads]

    def windows_by_reporter(self, role: str, pairs: Sequence[tuple[str, str]],
                            epoch: str) -> list[dict[str, WindowStats]]:
        """Per (config, arm) over one stage: each reporter's own aggregate, by its name.

        Two round trips: the reporter names of every pair, then their windows
        with the increments still pending (read together, so none is missed or
        counted twice); again for a pair whose reporters grew in between.
        """
        asks: list[tuple[str, str, tuple[str, ...]]] = [(c, a, ()) for c, a in pairs]
        out: list[dict[str, WindowStats] | None] = [None] * len(asks)
        for _ in range(ATTEMPTS):
            todo = [i for i, got in enumerate(out) if got is None]
            reads = self._read_windows(role, [asks[i] for i in todo], epoch)
            for i, read in zip(todo, reads):
                names = sorted(_text(n) for n in read[2])
                if names != sorted(asks[i][2]):
                    asks[i] = (*asks[i][:2], tuple(names))
                    continue
                _, by = pending_counts(read[1])
                windows = {name: _fields(flat) for name, flat in zip(asks[i][2], read[4:])}
                for name, counts in by.items():
                    windows[name] = _plus(windows.get(name, Counter()), counts)
                out[i] = {name: WindowStats(windows[name]) for name in sorted(windows)}
            if all(got is not None for got in out):
                return [got for got in out if got is not None]
        raise Conflict("reporters kept appearing under a concurrent ingest; read again")

    def stage_windows(self, role: str, pairs: Sequence[tuple[str, str]], epoch: str, *,
                      whole_reporters: bool = False) -> list[StageWindows]:
        """Per (config, arm) over one stage: its window and its reporters', as the view reads them.

        Without `whole_reporters`: the window, and each reporter's `EVIDENCE`
        fields only. With it: each reporter's whole window and no window (the
        caller sums the reporters it trusts). One round trip while the
        reporters are the ones the last read found.
        """
        seen, known = self._reporters_seen, self._closed_cells
        if len(seen) > REMEMBERED:
            seen.clear()
        if len(known) > REMEMBERED_CLOSED:
            known.clear()
        # (config, arm, reporter names, whether to read the closed-cells hash whole)
        asks = [(config, arm, seen.get((role, config, arm, epoch), ()), False)
                for config, arm in pairs]
        out: list[StageWindows | None] = [None] * len(asks)
        for _ in range(ATTEMPTS):
            todo = [i for i, got in enumerate(out) if got is None]
            reads = self._read_stage(role, [asks[i] for i in todo], epoch, whole_reporters)
            for i, (window, pending, members, closed, reporters) in zip(todo, reads):
                config, arm, asked, whole_closed = asks[i]
                names = tuple(sorted(_text(n) for n in members))
                where = (role, config, arm, epoch)
                seen[where] = names
                if names != tuple(sorted(asked)):
                    # Ask for the closed cells whole at once too when their id is new here,
                    # so a reader new to both needs one read more, not two.
                    kept_gen = known[where].gen if where in known else None
                    new_id = not whole_closed and closed is not None \
                        and kept_gen != _text(closed)
                    asks[i] = (config, arm, names, whole_closed or new_id)
                    continue
                apart = None
                if whole_closed:
                    apart = ClosedCells.of_hash(closed)
                    if apart is None:
                        known.pop(where, None)
                    else:
                        known[where] = apart
                elif closed is not None:
                    apart = known.get(where)
                    if apart is None or apart.gen != _text(closed):
                        asks[i] = (config, arm, asked, True)  # cells new to this reader
                        continue
                total, by = pending_counts(pending)
                whole = (None if window is None
                         else WindowStats.of_counts(_plus(_counts(window), total), apart))
                out[i] = (whole, _reporters(asked, reporters, by, whole_reporters))
            if all(got is not None for got in out):
                done = [got for got in out if got is not None]
                self._move_closed(role, pairs, epoch, [window for window, _ in done])
                return done
        raise Conflict("reporters kept appearing under a concurrent ingest; read again")

    def _move_closed(self, role: str, pairs: Sequence[tuple[str, str]], epoch: str,
                     windows: Sequence[WindowStats | None]) -> None:
        """Move the cells of buckets closed a while out of each window holding `MOVE_AT`
        of them, into its closed-cells hash (`window_closed`); a refusal (Redis taking no
        writes) leaves them where they are."""
        if not window_closed.MOVE_CLOSED:
            return
        cut = closed_before(time.time()) - 1  # a bucket's grace and one more bucket
        for (config, arm), window in zip(pairs, windows):
            names = [] if window is None else movable(window.cell_parts()[1], cut)
            if len(names) < MOVE_AT:
                continue
            keys = [window_key(role, config, arm, epoch), closed_key(role, config, arm, epoch)]
            try:
                self._move(keys=keys, args=[new_gen(), *names[:MOVE_AT_MOST]])
            except redis.exceptions.RedisError as error:
                # The view goes on (nothing was changed); say so, or a Redis refusing every
                # move would leave views slow with no sign why.
                LOG.warning("closed cells of %s not moved: %s", keys[0], error)
                return

    def _read_stage(self, role: str, asks: Sequence[tuple[str, str, Sequence[str], bool]],
                    epoch: str, whole_reporters: bool
                    ) -> list[tuple[Any, list[Any], Any, Any, list[Any]]]:
        """Per (config, arm, reporters, whole closed cells): (window hash or None, pending,
        names, the closed-cells id or None (the whole hash when asked; None when no window
        is read),
        reporters' reads).

        One MULTI/EXEC of plain reads, so all are of one moment (no fold between
        the window and its pending list), as READ_SCRIPT's are: a script's
        HGETALL builds the whole hash as a Lua table first, which cost Redis 2-3
        times the plain command's time on a 20,000-field window.
        """
        pipe = self.connection.pipeline(transaction=True)
        for config, arm, names, whole_closed in asks:
            if not whole_reporters:
                pipe.hgetall(window_key(role, config, arm, epoch))
                if whole_closed:
                    pipe.hgetall(closed_key(role, config, arm, epoch))
                else:
                    pipe.hget(closed_key(role, config, arm, epoch), GEN)
            pipe.lrange(pending_key(role, config, arm, epoch), 0, -1)
            pipe.smembers(reporters_key(role, config, arm, epoch))
            for name in names:
                key = reporter_window_key(role, config, arm, epoch, name)
                if whole_reporters:
                    pipe.hgetall(key)
                else:
                    pipe.hmget(key, EVIDENCE)
        with _redis_errors():
            answers = iter(pipe.execute())
        out = []
        for _, _, names, _ in asks:
            window = closed = None
            if not whole_reporters:
                window, closed = next(answers), next(answers)
            pending, members = next(answers), next(answers)
            out.append((window, pending, members, closed, [next(answers) for _ in names]))
        return out

    def _read_windows(self, role: str, asks: Sequence[tuple[str, str, Sequence[str]]],
                      epoch: str, args: Sequence[str] = ()) -> list[list[Any]]:
        """Per (config, arm, reporters): READ_SCRIPT's answer (window, pending, names, theirs)."""
        calls: list[tuple[list[str], list[Any]]] = [
            ([pending_key(role, config, arm, epoch), window_key(role, config, arm, epoch),
              reporters_key(role, config, arm, epoch), closed_key(role, config, arm, epoch),
              *(reporter_window_key(role, config, arm, epoch, name) for name in names)],
             list(args))
            for config, arm, names in asks]
        if not calls:
            return []
        with _redis_errors():
            try:
                return self._pipelined(self._read.sha, calls)
            except redis.exceptions.NoScriptError:
                self._read.sha = self.connection.script_load(READ_SCRIPT)
                return self._pipelined(self._read.sha, calls)

    def _pipelined(self, sha: str, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        pipe = self.connection.pipeline(transaction=False)
        for keys, args in calls:
            # EVALSHA as a plain command: a Cluster pipeline refuses pipe.evalsha().
            pipe.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        answers: list[Any] = pipe.execute()
        return answers


def _reporters(names: Sequence[str], answers: Sequence[Any], pending: dict[str, Counter[str]],
               whole: bool) -> dict[str, WindowStats]:
    """Each reporter's window from its read (HGETALL, or HMGET of `EVIDENCE`) and pending counts."""
    windows: dict[str, Counter[str]] = {}
    for name, answer in zip(names, answers):
        windows[name] = _counts(answer) if whole else Counter(
            {field: int(value) for field, value in zip(EVIDENCE, answer) if value is not None})
    for name, counts in pending.items():
        if not whole:
            counts = Counter({field: counts[field] for field in EVIDENCE if field in counts})
        windows[name] = _plus(windows.get(name, Counter()), counts)
    return {name: WindowStats(windows[name]) for name in sorted(windows)}


def _plus(stored: Counter[str], pending: Counter[str]) -> Counter[str]:
    """Stored counts with the pending ones added (Counter's + would drop fields at 0 or below)."""
    stored.update(pending)
    return stored


def _fields(flat: list[Any], leave_out: str = "") -> Counter[str]:
    """An HGETALL answered by a script (a flat field, value list) as counts (less `leave_out`)."""
    return Counter({text: int(value) for name, value in zip(flat[::2], flat[1::2])
                    if (text := _text(name)) != leave_out})


def _counts(hash_: dict[Any, Any]) -> Counter[str]:
    """An HGETALL answer (a dict of bytes, or of str) as counts."""
    names: Iterable[Any] = hash_.keys()
    if hash_ and isinstance(next(iter(names)), bytes):
        names = map(bytes.decode, names)
    counts: Counter[str] = Counter()
    # dict's own update, at C speed (Counter's adds one by one once it holds anything).
    dict.update(counts, zip(names, map(int, hash_.values())))
    return counts


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
