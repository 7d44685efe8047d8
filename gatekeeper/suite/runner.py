"""Running a suite: every scenario `repeats` times, each in a fresh workspace, never cached.

Runs are interleaved by repeat (every scenario's first run, then every second
run, ...) so a budget that stops the suite early still covers every scenario.
Bounded parallelism, a per-run timeout, and a budget (maximum runs, maximum cost)
checked before each run starts: when it is spent, no new run starts, the runs in
flight finish, and the result says what was left out.
"""

from __future__ import annotations

import sys
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Any, TextIO

from gatekeeper.checks.invariants import TraceVerdict, check
from gatekeeper.suite import adapter
from gatekeeper.suite.by_criterion import run_checks, suite_criteria
from gatekeeper.suite.isolation import RunContext, agent_credentials
from gatekeeper.suite.records import AGENT_OK, REPLAY_MATCH, RunOptions, RunRecord, SuiteRun
from gatekeeper.suite.replay import Fixture, ToolProxy, load_fixtures, record_fixture, replay_for
from gatekeeper.suite.scenario import AgentConfig, Scenario, Suite, repeats_for
from gatekeeper.suite.workspace import Workspace
from rolegate.trace import Trace


class Progress:
    """A progress bar on stderr: redrawn in place on a terminal, a line per tenth otherwise."""

    def __init__(self, total: int, stream: TextIO | None) -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.tty = bool(stream is not None and stream.isatty())
        self.done = self.failed = 0
        self._last_tenth = -1

    def advance(self, passed: bool) -> None:
        """Count one finished run and redraw."""
        self.done += 1
        self.failed += 0 if passed else 1
        if self.stream is None:
            return
        tenth = self.done * 10 // self.total
        if not self.tty and tenth == self._last_tenth:
            return
        self._last_tenth = tenth
        width = 30
        filled = width * self.done // self.total
        bar = "#" * filled + "." * (width - filled)
        line = (f"[{bar}] {self.done}/{self.total} runs, {self.done - self.failed} passed, "
                f"{self.failed} failed")
        self.stream.write(f"\r{line}" if self.tty else f"{line}\n")
        self.stream.flush()

    def finish(self, note: str | None = None) -> None:
        """End the bar's line, then print `note` (e.g. why the budget stopped the suite)."""
        if self.stream is None:
            return
        if self.tty:
            self.stream.write("\n")
        if note:
            self.stream.write(f"{note}\n")
        self.stream.flush()


def plan(suite: Suite, options: RunOptions) -> list[tuple[Scenario, int]]:
    """Every (scenario, repeat) to run, interleaved by repeat."""
    counts = {s.id: repeats_for(s, options.repeats, options.weight) for s in suite.scenarios}
    jobs: list[tuple[Scenario, int]] = []
    for repeat in range(max(counts.values(), default=0)):
        jobs.extend((s, repeat) for s in suite.scenarios if repeat < counts[s.id])
    return jobs


def judge_run(scenario: Scenario, trace: Trace | None, error: str | None,
              replay_misses: tuple[str, ...]) -> tuple[bool, dict[str, Any]]:
    """Whether a run passed, and its checks (the online invariants plus the suite's own)."""
    if trace is None:
        verdict = TraceVerdict(passed=False, criteria={AGENT_OK: False})
        return False, verdict.to_json() | {"error": error}
    verdict = check(trace, scenario.invariants)
    criteria = dict(verdict.criteria)
    if replay_misses:
        criteria[REPLAY_MATCH] = False
        verdict = replace(verdict, passed=False, criteria=criteria)
    return verdict.passed, verdict.to_json()


class SuiteRunner:
    """Runs one config of one suite through one agent command."""

    def __init__(self, suite: Suite, config: AgentConfig, agent_command: str,
                 options: RunOptions, *, progress: TextIO | None = sys.stderr) -> None:
        self.suite = suite
        self.config = config
        self.argv = adapter.split_command(agent_command)
        self.options = options
        self.progress_stream = progress
        # Replay fixtures are loaded (and schema-checked) before any run starts.
        self.fixtures: dict[str, list[Fixture]] | None = (
            load_fixtures(options.replay_dir, suite.tools) if options.replay_dir else None
        )
        self.credentials = agent_credentials(suite.tools, options.eval_mode,
                                             adapter.inherited_environment())
        self.base_env = adapter.inherited_environment()
        self.schema_hash = suite.tools.catalog_hash()
        #: Removes finished workspaces off the runs' critical path (rmtree is slow on
        #: some filesystems); `run()` waits for it, so nothing outlives the suite.
        self._janitor: ThreadPoolExecutor | None = None
        # Criteria from the config's spec (issue 8), scored beside the invariants.
        self.criteria = suite_criteria(suite.root, config.data)

    def run(self) -> SuiteRun:
        """Run the whole plan within the budget; the proxy lives exactly as long as this."""
        jobs = plan(self.suite, self.options)
        planned: dict[str, int] = {}
        for scenario, _repeat in jobs:
            planned[scenario.id] = planned.get(scenario.id, 0) + 1
        result = SuiteRun(self.suite, self.config, self.options, planned,
                          started_at=time.time())
        progress = Progress(len(jobs), self.progress_stream)
        self._janitor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="workspace-rm")
        try:
            self._run_jobs(jobs, result, progress)
        finally:
            self._janitor.shutdown(wait=True)
            self._janitor = None
        result.records.sort(key=lambda r: (r.scenario, r.repeat))
        result.finished_at = time.time()
        progress.finish(f"suite stopped early: {result.stopped}" if result.stopped else None)
        return result

    def _run_jobs(self, jobs: list[tuple[Scenario, int]], result: SuiteRun,
                  progress: Progress) -> None:
        spent = 0.0
        with ToolProxy() as proxy, \
                ThreadPoolExecutor(max_workers=max(1, self.options.parallel)) as pool:
            pending: set[Future[RunRecord]] = set()
            queue = list(jobs)
            while queue or pending:
                while queue and len(pending) < max(1, self.options.parallel):
                    stop = self._budget_stop(len(result.records) + len(pending), spent)
                    if stop:
                        result.stopped = f"{stop}; {len(queue)} of {len(jobs)} runs not started"
                        queue.clear()
                        break
                    scenario, repeat = queue.pop(0)
                    pending.add(pool.submit(self.run_one, proxy, scenario, repeat))
                if not pending:
                    break
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    record = future.result()
                    result.records.append(record)
                    spent += record.trace.cost_usd if record.trace else 0.0
                    progress.advance(record.passed)

    def _dispose(self, workspace: Workspace) -> None:
        if self._janitor is not None:
            self._janitor.submit(workspace.close)
        else:
            workspace.close()

    def _budget_stop(self, started: int, spent: float) -> str | None:
        max_runs, max_cost = self.options.max_runs, self.options.max_cost_usd
        if max_runs is not None and started >= max_runs:
            return f"budget: max runs {max_runs} reached"
        if max_cost is not None and spent >= max_cost:
            return f"budget: max cost ${max_cost:g} reached (spent ${spent:.4f})"
        return None

    def run_one(self, proxy: ToolProxy, scenario: Scenario, repeat: int) -> RunRecord:
        """One run: fresh workspace, attached to the proxy, the agent, its trace, its checks."""
        run_id = f"{scenario.id}.r{repeat}.{uuid.uuid4().hex[:10]}"
        replay = replay_for(self.fixtures, scenario.id, repeat) if self.fixtures is not None \
            else None
        workspace = Workspace(self.suite, scenario)
        try:
            context = RunContext(run_id=run_id, workspace=workspace, catalog=self.suite.tools,
                                 eval_mode=self.options.eval_mode, replay=replay,
                                 credentials=self.credentials)
            proxy.attach(context)
            try:
                request = adapter.agent_request(context, scenario, repeat, self.config,
                                                proxy.run_url(run_id))
                env = adapter.agent_environment(request, self.config,
                                                self.suite.tools.credentials, self.base_env)
                outcome = adapter.collect(
                    self.argv, request, env, context, scenario, self.config,
                    role=self.options.role, tool_schema_hash=self.schema_hash,
                    timeout_s=self.options.timeout_s,
                )
            finally:
                proxy.detach(run_id)
                context.close()
            if self.options.record_dir is not None and outcome.trace is not None:
                record_fixture(self.options.record_dir, context, scenario=scenario.id,
                               repeat=repeat, config=self.config.name)
        finally:
            self._dispose(workspace)
        misses = tuple(context.replay_misses)
        passed, checks = judge_run(scenario, outcome.trace, outcome.error, misses)
        checks |= run_checks(self.criteria, self.suite.root, scenario, outcome.trace)
        return RunRecord(
            scenario=scenario.id, repeat=repeat, run_id=run_id, passed=passed,
            error=outcome.error, trace=outcome.trace, checks=checks, replay_misses=misses,
            intercepted=tuple(c.tool for c in context.calls if c.intercepted),
            wall_s=round(outcome.wall_s, 6),
        )
