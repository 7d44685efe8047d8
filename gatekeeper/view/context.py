"""What a gate view is computed from: the role's binding, its stage's epoch and each arm's window.

The window of each arm is "the traces since the current stage began" (the
binding's `stage_since`), read from the running aggregates the ingest keeps, so
building a context costs one Redis round trip whatever the window holds
(`TraceStore.stage_windows`: each window hash once, of each reporter's window
only what the view shows, unless the policy trusts only some reporters).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bindings.models import VersionedBinding
from bindings.store import BindingStore
from gatekeeper.store.trace_keys import epoch_of
from gatekeeper.store.traces import TraceStore
from gatekeeper.view_model import Window
from gatekeeper.window import WindowStats


@dataclass(frozen=True)
class GateContext:
    """Everything a gate section reads: the binding, the window epoch, each arm's window."""

    role: str
    record: VersionedBinding
    epoch: str
    #: arm -> (config, window) for "current", and "candidate"/"shadow" when there is one.
    #: With `trusted_reporters` in the policy, the window holds only their traces.
    arms: dict[str, tuple[str, WindowStats]]
    traces: TraceStore
    now: float
    #: arm -> reporter name -> that reporter's own window (every reporter, trusted or not);
    #: with no `trusted_reporters`, only its `window_reads.EVIDENCE` fields (what the
    #: arms section shows per reporter: n, passes, forbidden calls, clashes).
    by_reporter: dict[str, dict[str, WindowStats]] = field(default_factory=dict)


def arm_configs(record: VersionedBinding) -> dict[str, str]:
    """Which config each arm of the role runs: current always, candidate and shadow if set."""
    binding = record.binding
    arms = {"current": binding.current}
    if binding.candidate is not None:
        arms["candidate"] = binding.candidate
        arms["shadow"] = binding.candidate
    return arms


def gate_context(store: BindingStore, traces: TraceStore, role: str, now: float) -> GateContext:
    """Read the binding (fresh, not a worker's copy) and each arm's current-stage window."""
    return context_of(store.get(role), traces, now)


def context_of(record: VersionedBinding, traces: TraceStore, now: float) -> GateContext:
    """Each arm's window over the stage `record` began (a past stage's windows are kept)."""
    role = record.role
    epoch = epoch_of(record.binding)
    configs = arm_configs(record)
    pairs = [(config, arm) for arm, config in configs.items()]
    trusted = record.binding.gate.trusted_reporters
    read = traces.stage_windows(role, pairs, epoch, whole_reporters=trusted is not None)
    by_reporter = {arm: reporters for arm, (_, reporters) in zip(configs, read)}
    arms = {}
    for (arm, config), (window, reporters) in zip(configs.items(), read):
        if window is None:  # read so only when the policy trusts some reporters
            # Only the trusted reporters' traces count toward promotion: an arm's window
            # is the sum of theirs, whatever other in-scope tokens reported.
            window = trusted_window(reporters, trusted or ())
        arms[arm] = (config, window)
    return GateContext(role, record, epoch, arms, traces, now, by_reporter)


def trusted_window(windows: dict[str, WindowStats], trusted: tuple[str, ...]) -> WindowStats:
    """The sum of the `trusted` reporters' windows (an empty window when none reported)."""
    total = WindowStats.from_fields({})
    for name in trusted:
        if name in windows:
            total = total.merge(windows[name])
    return total


def view_header(ctx: GateContext) -> dict[str, Any]:
    """What every gate view opens with (`model.GateHeader`'s fields, as values to construct it
    with): the role's stage, arms' configs, window and policy."""
    binding = ctx.record.binding
    since = binding.stage_since
    return {
        "role": ctx.role,
        "version": ctx.record.version,
        "stage": binding.stage,
        "share": binding.share,
        "paused": binding.paused,
        "current": binding.current,
        "candidate": binding.candidate,
        "window": Window.model_construct(
            since=since, seconds=None if since is None else max(0.0, ctx.now - since),
            epoch=ctx.epoch),
        "policy": binding.gate,
        "time": ctx.now,
    }
