"""The agent adapter protocol: how the suite hands a run to an agent and gets a trace back.

The agent is a command (`--agent CMD`, split like a shell would). For each run it
is started in the run's workspace (its working directory) with:

- stdin: one JSON object, `AgentRequest` (protocol, run_id, scenario, repeat, task,
  config, config_name, workspace, tool_url, credentials);
- environment: the same essentials as `ROLEGATE_RUN_ID`, `ROLEGATE_TASK`,
  `ROLEGATE_WORKSPACE`, `ROLEGATE_TOOL_URL`, `ROLEGATE_CONFIG` (the config file's
  path), plus one variable per catalog credential (placeholders in eval mode);
  the real credential variables are removed;
- tools: `POST {tool_url}/tools/<name>` with the arguments as a JSON object.

It prints one JSON object on stdout (the whole output, or its last line): a trace
in the `Trace` model, where every field the suite knows better may be left out.
The suite fills in run_id, role, config, arm and scenario; takes the steps from
the tool proxy (what was really called, not what the agent says it called); lists
the workspace's files as artifacts (whatever the agent claims); and stamps what it can derive. One extractor
for both lanes: the result is validated by the same `Trace` model the router uses.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gatekeeper.suite.isolation import RunContext
from gatekeeper.suite.scenario import AgentConfig, Scenario
from rolegate.body import stamps_of
from rolegate.trace import Trace

PROTOCOL = "rolegate-agent/1"
#: Trace fields the suite owns; an agent's values for them are overwritten.
SUITE_FIELDS = ("run_id", "role", "config", "arm", "scenario")
MAX_OUTPUT_CHARS = 200_000


class AgentFailure(Exception):
    """The agent did not hand back a usable trace (crash, timeout, bad JSON)."""


@dataclass(frozen=True)
class AgentOutcome:
    """What one agent process did: its trace, or why there is none, and its wall time."""

    trace: Trace | None
    error: str | None
    wall_s: float
    stderr_tail: str = ""


def split_command(command: str) -> list[str]:
    """The agent command as argv (shell-like quoting, no shell).

    The agent runs inside its workspace, so any word naming an existing path
    relative to where the suite was started is made absolute. Absolute, not
    resolved: a venv's `bin/python` is a symlink to the base interpreter, and
    only under its own path does it find the venv's packages.
    """
    argv = shlex.split(command)
    if not argv:
        raise ValueError("the agent command is empty")
    return [os.path.abspath(word) if not os.path.isabs(word) and os.sep in word
            and Path(word).exists() else word for word in argv]


def agent_request(context: RunContext, scenario: Scenario, repeat: int, config: AgentConfig,
                  tool_url: str) -> dict[str, Any]:
    """The JSON object the agent reads on stdin (with the config's `body` when it has one)."""
    body = config.body
    extra = {"body": body.model_dump(mode="json")} if body is not None else {}
    return {
        **extra,
        "protocol": PROTOCOL,
        "run_id": context.run_id,
        "scenario": scenario.id,
        "repeat": repeat,
        "task": scenario.task,
        "config": config.data,
        "config_name": config.name,
        "workspace": str(context.workspace.root),
        "tool_url": tool_url,
        "credentials": context.credentials,
    }


def agent_environment(request: Mapping[str, Any], config: AgentConfig,
                      credential_vars: Mapping[str, str],
                      base: Mapping[str, str]) -> dict[str, str]:
    """The agent's environment: `base` without real secrets, plus the protocol variables.

    The catalog's credential variables and every inherited `ROLEGATE_*` variable
    (the router token, the judge's key) are dropped: an agent under test gets
    only what the protocol hands it.
    """
    secret = set(credential_vars.values())
    env = {k: v for k, v in base.items() if k not in secret and not k.startswith("ROLEGATE_")}
    env.update({
        "ROLEGATE_RUN_ID": request["run_id"],
        "ROLEGATE_TASK": request["task"],
        "ROLEGATE_WORKSPACE": request["workspace"],
        "ROLEGATE_TOOL_URL": request["tool_url"],
        "ROLEGATE_CONFIG": str(config.path.resolve()),
    })
    env.update(request["credentials"])
    return env


def parse_output(stdout: str) -> dict[str, Any]:
    """The agent's JSON object: all of stdout, else its last non-empty line."""
    text = stdout.strip()
    candidates = [text]
    lines = [line for line in text.splitlines() if line.strip()]
    if lines:
        candidates.append(lines[-1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    raise AgentFailure(f"stdout is not a JSON object: {text[:200]!r}")


def build_trace(reported: dict[str, Any], context: RunContext, scenario: Scenario,
                config: AgentConfig, *, role: str, tool_schema_hash: str,
                wall_s: float) -> Trace:
    """Complete the agent's report into a Trace, with the proxy's steps as the truth."""
    data = {k: v for k, v in reported.items() if k not in SUITE_FIELDS}
    data.update(run_id=context.run_id, role=role, config=config.name, arm="candidate",
                scenario=scenario.id)
    if context.calls or "steps" not in data:
        # The proxy saw every call; an agent cannot hide a forbidden one by omitting it.
        data["steps"] = [call.step().model_dump() for call in context.calls]
        for derived in ("tools", "step_count", "tool_errors"):
            data.pop(derived, None)
    # The workspace is the truth about what the run produced, not the agent's claim.
    data["artifacts"] = context.workspace.files()
    if "output_text" not in data:
        # Invariants read the output text; without one, the artifacts the scenario
        # requires are the output.
        parts = [context.workspace.read_text(p) for p in scenario.invariants.artifact_exists
                 if p in data["artifacts"]]
        data["output_text"] = "\n".join(parts)
    if not data.get("latency_s"):
        data["latency_s"] = round(wall_s, 6)
    stamps = dict(data.get("stamps") or {})
    stamps.setdefault("agent_version", str(config.data.get("agent_version", "unknown")))
    body = config.body
    if body is not None:
        # What the agent ran is the body: its hashes say what changed between configs.
        for name, value in stamps_of(body, stamps["agent_version"]).items():
            stamps.setdefault(name, value)
    stamps.setdefault("instruction_hash", config.content_hash)
    stamps.setdefault("model_id", str(config.data.get("model", "unknown")))
    stamps.setdefault("tool_schema_hash", tool_schema_hash)
    data["stamps"] = stamps
    data.setdefault("time", time.time())
    return Trace.model_validate(data)


def run_agent(argv: list[str], request: dict[str, Any], env: Mapping[str, str], cwd: str,
              timeout_s: float) -> tuple[dict[str, Any], float, str]:
    """Start the agent, feed it the request, wait at most `timeout_s`.

    Returns (reported trace dict, wall seconds, stderr tail); AgentFailure on a
    crash, a timeout or unusable output. The process is killed on timeout.
    """
    started = time.perf_counter()
    try:
        # Its own session, so a timeout kills the agent's children too (a shell wrapper's
        # child would otherwise keep the pipes open and the suite waiting).
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=dict(env), cwd=cwd,
                                start_new_session=True)
    except OSError as exc:
        raise AgentFailure(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
    try:
        stdout, stderr = proc.communicate(json.dumps(request), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise AgentFailure(f"timed out after {timeout_s:g} s") from None
    wall = time.perf_counter() - started
    tail = stderr[-2000:]
    if proc.returncode != 0:
        raise AgentFailure(f"exited with status {proc.returncode}: {tail[-300:].strip()}")
    return parse_output(stdout[-MAX_OUTPUT_CHARS:]), wall, tail


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill the agent and everything it started, then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it ended on its own between the timeout and the kill
    proc.communicate()


def collect(argv: list[str], request: dict[str, Any], env: Mapping[str, str],
            context: RunContext, scenario: Scenario, config: AgentConfig, *, role: str,
            tool_schema_hash: str, timeout_s: float) -> AgentOutcome:
    """Run the agent once and turn what it did into an AgentOutcome (never raises for it)."""
    started = time.perf_counter()
    try:
        reported, wall, tail = run_agent(argv, request, env, str(context.workspace.root),
                                         timeout_s)
        trace = build_trace(reported, context, scenario, config, role=role,
                            tool_schema_hash=tool_schema_hash, wall_s=wall)
    except AgentFailure as exc:
        return AgentOutcome(None, str(exc), time.perf_counter() - started)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        return AgentOutcome(None, f"trace invalid: {where}: {err.get('msg')}",
                            time.perf_counter() - started)
    return AgentOutcome(trace, None, wall, tail)


def inherited_environment() -> dict[str, str]:
    """The suite's own environment, the base an agent's is built from."""
    return dict(os.environ)
