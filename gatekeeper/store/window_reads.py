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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.commands.core import Script

from bindings.connection import Connection
from bindings.errors import Conflict
from bindings.store import _redis_errors
from gatekeeper.store.trace_keys import (
    pending_key,
    reporter_window_key,
    reporters_key,
    window_key,
)
from gatekeeper.store.window_fold import READ_SCRIPT, pending_counts
from gatekeeper.window import CLASHES, WindowStats

#: Reads before giving up on reporters that keep appearing under a concurrent ingest.
ATTEMPTS = 4
#: What the gate view shows of each reporter (`view.arms`): its n, pass and
#: forbidden-call rates, and its clashes.
EVIDENCE = ("n", "passes", "forbidden", CLASHES)
#: Windows whose reporter names are remembered (then forgotten all at once).
REMEMBERED = 1_000

#: Per (config, arm): the arm's window (None when not read) and each reporter's.
StageWindows = tuple[WindowStats | None, dict[str, WindowStats]]


class WindowReads:
    """The window reads of `TraceStore`, which sets `connection` and `_read` (READ_SCRIPT)."""

    connection: Connection
    _read: Script
    #: (role, config, arm, epoch) -> the reporter names the last read found.
    _reporters_seen: dict[tuple[str, str, str, str], tuple[str, ...]]

    def window(self, role: str, config: str, arm: str, epoch: str) -> WindowStats:
        """The running aggregate of one (role, config, arm) over one stage."""
        return self.windows(role, [(config, arm)], epoch)[0]

    def windows(self, role: str, pairs: Iterable[tuple[str, str]],
                epoch: str) -> list[WindowStats]:
        """Several (config, arm) aggregates over one stage, in one round trip."""
        reads = self._read_windows(role, [(config, arm, ()) for config, arm in pairs], epoch)
        return [WindowStats(_plus(_fields(read[0]), pending_counts(read[1])[0]))
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
                windows = {name: _fields(flat) for name, flat in zip(asks[i][2], read[3:])}
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
        seen = self._reporters_seen
        if len(seen) > REMEMBERED:
            seen.clear()
        asks = [(config, arm, seen.get((role, config, arm, epoch), ())) for config, arm in pairs]
        out: list[StageWindows | None] = [None] * len(asks)
        for _ in range(ATTEMPTS):
            todo = [i for i, got in enumerate(out) if got is None]
            reads = self._read_stage(role, [asks[i] for i in todo], epoch, whole_reporters)
            for i, (window, pending, members, reporters) in zip(todo, reads):
                config, arm, asked = asks[i]
                names = tuple(sorted(_text(n) for n in members))
                seen[(role, config, arm, epoch)] = names
                if names != tuple(sorted(asked)):
                    asks[i] = (config, arm, names)
                    continue
                total, by = pending_counts(pending)
                whole = (None if window is None
                         else WindowStats.of_counts(_plus(_counts(window), total)))
                out[i] = (whole, _reporters(asked, reporters, by, whole_reporters))
            if all(got is not None for got in out):
                return [got for got in out if got is not None]
        raise Conflict("reporters kept appearing under a concurrent ingest; read again")

    def _read_stage(self, role: str, asks: Sequence[tuple[str, str, Sequence[str]]], epoch: str,
                    whole_reporters: bool) -> list[tuple[Any, list[Any], Any, list[Any]]]:
        """Per (config, arm, reporters): (window hash or None, pending, names, reporters' reads).

        One MULTI/EXEC of plain reads, so all are of one moment (no fold between
        the window and its pending list), as READ_SCRIPT's are: a script's
        HGETALL builds the whole hash as a Lua table first, which cost Redis 2-3
        times the plain command's time on a 20,000-field window.
        """
        pipe = self.connection.pipeline(transaction=True)
        for config, arm, names in asks:
            if not whole_reporters:
                pipe.hgetall(window_key(role, config, arm, epoch))
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
        for _, _, names in asks:
            window = None if whole_reporters else next(answers)
            pending, members = next(answers), next(answers)
            out.append((window, pending, members, [next(answers) for _ in names]))
        return out

    def _read_windows(self, role: str, asks: Sequence[tuple[str, str, Sequence[str]]],
                      epoch: str, args: Sequence[str] = ()) -> list[list[Any]]:
        """Per (config, arm, reporters): READ_SCRIPT's answer (window, pending, names, theirs)."""
        calls: list[tuple[list[str], list[Any]]] = [
            ([pending_key(role, config, arm, epoch), window_key(role, config, arm, epoch),
              reporters_key(role, config, arm, epoch),
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


def _fields(flat: list[Any]) -> Counter[str]:
    """An HGETALL answered by a script (a flat field, value list) as counts."""
    return Counter({_text(name): int(value) for name, value in zip(flat[::2], flat[1::2])})


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
