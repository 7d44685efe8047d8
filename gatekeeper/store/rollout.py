"""Reads a rollout's earlier stages: which they were, and the candidate's counts in each.

Nothing new is written for this. The stages come from the binding history
(`gatekeeper.stats.rollout.walk` over the newest entries, read a page at a time,
`LOOKBACK` at most), and each stage's counts from what ingest already keeps
for it: the candidate's window under that stage's epoch (the shadow arm in
shadow, the candidate arm after) and, for shadow, the paired tally's flips;
with current's window of the epoch, the stage's comparison with concurrent
current over its cells (`gatekeeper.stats.concurrent`). A
window counts each run id once (a retried trace is stored and counted once,
`gatekeeper.store.traces`), and ingest files a run under the stage the
authoritative binding is in when it arrives, so a finished stage's counts no
longer move and no run counts in two stages. With `trusted_reporters` a
window is the sum of the trusted reporters' own, as the stage's gate read it.
"""

from __future__ import annotations

from collections.abc import Iterator

from bindings.models import Binding, HistoryEntry, Stage, VersionedBinding
from bindings.store import BindingStore
from gatekeeper.stats.concurrent import Comparison, cells_of
from gatekeeper.stats.drift import RUN_FAILURE
from gatekeeper.stats.rollout import (
    Carried,
    EarlierStage,
    Walk,
    carried_of,
    epoch_key,
    walk,
)
from gatekeeper.store.paired_state import Arms, PairedStates
from gatekeeper.store.traces import TraceStore
from gatekeeper.window import WindowStats

#: History entries read back at most to find a rollout's first stage.
LOOKBACK = 200
#: Entries per history read: nearly every rollout fits in the first page.
PAGE = 10


class RolloutReader:
    """Finds the rollout a binding's stage belongs to and counts its earlier stages."""

    def __init__(self, bindings: BindingStore, traces: TraceStore, *,
                 lookback: int = LOOKBACK, page: int = PAGE) -> None:
        self.bindings = bindings
        self.traces = traces
        self.lookback = lookback
        self.page = page

    def carried(self, record: VersionedBinding) -> Carried | None:
        """The earlier stages of `record`'s rollout with their counts; None: no live rollout."""
        found = self.walk(record)
        if found is None:
            return None
        return carried_of(found, [self._counts(record.role, b) for b in found.earlier])

    def walk(self, record: VersionedBinding) -> Walk | None:
        """The stages of `record`'s rollout, without their counts; None: no live rollout."""
        return walk(record, self._entries(record.role))

    def _entries(self, role: str) -> Iterator[HistoryEntry]:
        """The role's history newest first, a page at a time, `lookback` entries at most."""
        offset = 0
        while offset < self.lookback:
            entries = self.bindings.history(role, limit=min(self.page, self.lookback - offset),
                                            offset=offset)
            yield from entries
            if len(entries) < self.page:
                return
            offset += len(entries)

    def _counts(self, role: str, binding: Binding) -> EarlierStage:
        """The candidate's counts in one earlier stage (and the flips, for shadow)."""
        assert binding.candidate is not None  # walk() only returns live stages
        epoch = epoch_key(binding.stage_since)
        arm = "shadow" if binding.stage is Stage.SHADOW else "candidate"
        window = self._window(role, binding.candidate, arm, epoch, binding)
        regressions = improvements = 0
        if binding.stage is Stage.SHADOW:
            trusted = binding.gate.trusted_reporters
            tally, _, _ = PairedStates(self.traces.connection).load(
                Arms(role, epoch, binding.current, binding.candidate, binding.stage_since,
                     None if trusted is None else frozenset(trusted)))
            if tally is not None:
                regressions, improvements = tally.regressions, tally.improvements
        # Every cell of a finished stage is closed: its runs no longer move.
        current = self._window(role, binding.current, "current", epoch, binding)
        compared = Comparison.of(cells_of(window.cells(RUN_FAILURE), current.cells(RUN_FAILURE)))
        return EarlierStage(binding.stage, binding.share, binding.stage_since, window.n,
                            window.passes, regressions, improvements, compared)

    def _window(self, role: str, config: str, arm: str, epoch: str,
                binding: Binding) -> WindowStats:
        """The arm's window in that stage, the trusted reporters' alone when the policy names them."""
        trusted = binding.gate.trusted_reporters
        if trusted is None:
            return self.traces.window(role, config, arm, epoch)
        own = self.traces.windows_by_reporter(role, [(config, arm)], epoch)[0]
        total = WindowStats()
        for name in trusted:
            if name in own:
                total = total.merge(own[name])
        return total
