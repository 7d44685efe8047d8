"""What a suite run produces: one record per run, the options it ran with, and the whole run.

Plain records, apart from the runner that makes them, so the verdict, the
per-criterion review and the comparison read them without importing the runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gatekeeper.suite.scenario import AgentConfig, Suite
from rolegate.trace import Trace

#: Extra criterion keys the suite adds beside the invariants' own.
AGENT_OK = "agent_ok"
REPLAY_MATCH = "replay_match"


class RunRecord(BaseModel):
    """One run of one scenario: its trace (if any), its checks, and what the proxy saw."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scenario: str
    repeat: int = Field(ge=0)
    run_id: str
    passed: bool
    error: str | None = None
    trace: Trace | None = None
    #: `TraceVerdict.to_json()`, plus the suite's agent_ok / replay_match criteria.
    checks: dict[str, Any] = Field(default_factory=dict)
    replay_misses: tuple[str, ...] = ()
    intercepted: tuple[str, ...] = ()
    wall_s: float = 0.0

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools the run called, in order (empty when the agent failed)."""
        return self.trace.tools if self.trace is not None else ()


@dataclass(frozen=True)
class RunOptions:
    """How to run a suite (the `rolegate suite run` flags)."""

    repeats: int | None = None
    weight: str | None = None
    parallel: int = 4
    timeout_s: float = 120.0
    max_runs: int | None = None
    max_cost_usd: float | None = None
    record_dir: Path | None = None
    replay_dir: Path | None = None
    eval_mode: bool = True
    role: str = "offline"


@dataclass
class SuiteRun:
    """Everything one suite run produced, before the gate reads it."""

    suite: Suite
    config: AgentConfig
    options: RunOptions
    planned: dict[str, int]
    records: list[RunRecord] = field(default_factory=list)
    stopped: str | None = None
    started_at: float = 0.0
    finished_at: float = 0.0


