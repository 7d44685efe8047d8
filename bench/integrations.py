"""Per framework: the glue a caller writes, and what rolegate costs a run beside the bare run.

    .venv/bin/python -m bench.integrations [--runs 200] [--rounds 5]

Glue: the statements (and physical lines) between the `# rolegate glue: begin`
and `# rolegate: end` markers of each docs/integrations page's example, the
examples tests/test_docs_integrations.py runs as written. Imports and the
one `Client(...)` a process makes are not counted.

Cost: each framework's agent (one model turn issuing two tool calls, then an
answer, from the framework's own scripted or function model: no network) runs
`--runs` times bare and `--runs` times with rolegate (resolve, recorder with
stamps from the agent, the framework's guard, record, and report through a
`Client` whose background sender posts to a real gunicorn router on its own
redis-server started here; a batch lingers up to the client's default
`linger` (0.1 s) for more traces, so one POST carries several runs; each round
ends with `client.flush()`, so sending its traces counts), in interleaved rounds. Per run it prints the mean
CPU time of each (process CPU, so the sender thread's work is included and a
loaded machine's waiting is not), rolegate's cost (the difference) and the
ratio. Each arm's timing starts from a collected heap (`gc.collect()`), so a
full collection made due by earlier arms is not charged to the next one. The
machine is shared: expect noise.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import gc
import re
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import requests

from bench.client_resolve import (
    CALLER,
    OPERATOR,
    gunicorn_router,
    redis_server,
)
from rolegate import Client

ROLE = "support"
PAGES = {"pydantic-ai": "pydantic-ai.md", "openai-agents": "openai-agents.md",
         "google-adk": "google-adk.md", "opentelemetry": "opentelemetry.md"}
#: (bare run, run with rolegate, record + report of a finished run's result)
Runs = tuple[Callable[[], Any], Callable[[str], object], Callable[[Any, str], object]]
_GLUE = re.compile(r"# rolegate glue: begin\n(.*?)\n\s*# rolegate glue: end", re.DOTALL)


def glue(page: str) -> tuple[int, int]:
    """(statements, physical lines) of glue in a docs page's example.

    The statements between the glue markers, plus each line elsewhere ending in
    a `# rolegate glue` comment (an argument added to the caller's own call).
    """
    text = (ROOT / "docs" / "integrations" / page).read_text()
    match = _GLUE.search(text)
    if match is None:
        raise SystemExit(f"docs/integrations/{page} has no glue markers")
    code = textwrap.dedent(match.group(1))
    statements = sum(isinstance(node, ast.stmt) for node in ast.walk(ast.parse(code)))
    lines = sum(1 for line in code.splitlines() if line.strip() and not line.strip()
                .startswith("#"))
    tagged = sum(1 for line in text.splitlines() if line.rstrip().endswith("# rolegate glue"))
    return statements + tagged, lines + tagged


def pydantic_ai_runs(client: Client) -> Runs:
    """A bare run and a rolegate run of one pydantic-ai agent on a FunctionModel."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from rolegate.integrations import pydantic_ai as rg

    def model(messages: list[Any], info: Any) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("search", {"q": "x"}),
                                        ToolCallPart("lookup", {"id": 1})])
        return ModelResponse(parts=[TextPart("done")])

    bare_agent = Agent(FunctionModel(model, model_name="scripted"), name="support",
                       instructions="Answer.")
    agent = Agent(FunctionModel(model, model_name="scripted"), name="support",
                  instructions="Answer.", capabilities=[rg.Guard()])
    for each in (bare_agent, agent):
        each.tool_plain(search)
        each.tool_plain(lookup)

    def bare() -> object:
        return bare_agent.run_sync("go")

    def with_rolegate(key: str) -> object:
        with client.recorder(client.resolve(ROLE, key), stamps=rg.stamps(agent)) as run, \
                rg.guard(client, run):
            rg.record(run, agent.run_sync("go"))
        return run

    def record_report(result: Any, key: str) -> object:
        with client.recorder(client.resolve(ROLE, key), stamps=rg.stamps(agent)) as run:
            rg.record(run, result)
        return run

    return bare, with_rolegate, record_report


def openai_agents_runs(client: Client) -> Runs:
    """A bare run and a rolegate run of one Agents SDK agent on a ScriptedModel."""
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from rolegate.integrations import openai_agents as rg

    config = RunConfig(tracing_disabled=True)

    def agent() -> Any:
        return Agent(name="support", instructions="Answer.", tools=[
            function_tool(search), function_tool(lookup)], model=ScriptedModel([
                ModelStep(output=[function_call("search", {"q": "x"}, call_id="c1"),
                                  function_call("lookup", {"id": 1}, call_id="c2")]),
                ModelStep(output=[assistant_message("done")])]))

    def bare() -> object:
        return Runner.run_sync(agent(), "go", run_config=config)

    def with_rolegate(key: str) -> object:
        one = rg.protect(agent())
        with client.recorder(client.resolve(ROLE, key), stamps=rg.stamps(one)) as run, \
                rg.guard(client, run):
            rg.record(run, Runner.run_sync(one, "go", run_config=config))
        return run

    stamped = agent()

    def record_report(result: Any, key: str) -> object:
        with client.recorder(client.resolve(ROLE, key), stamps=rg.stamps(stamped)) as run:
            rg.record(run, result)
        return run

    return bare, with_rolegate, record_report


def google_adk_runs(client: Client) -> Runs:
    """A bare run and a rolegate run of one ADK agent on a scripted BaseLlm."""
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    from rolegate.integrations import google_adk as rg

    class Scripted(BaseLlm):
        turn: int = 0

        async def generate_content_async(self, llm_request: Any,
                                         stream: bool = False) -> Any:
            self.turn += 1
            parts = ([types.Part(function_call=types.FunctionCall(
                name="search", args={"q": "x"}, id="c1")),
                types.Part(function_call=types.FunctionCall(
                    name="lookup", args={"id": 1}, id="c2"))] if self.turn % 2 == 1
                else [types.Part(text="done")])
            yield LlmResponse(content=types.Content(role="model", parts=parts),
                              usage_metadata=types.GenerateContentResponseUsageMetadata(
                                  prompt_token_count=20, candidates_token_count=4,
                                  total_token_count=24))

    agent = LlmAgent(name="support", model=Scripted(model="scripted"), instruction="Answer.",
                     tools=[search, lookup])
    runner = InMemoryRunner(agent=agent, app_name="bench")
    message = types.Content(role="user", parts=[types.Part(text="go")])

    async def events() -> list[Any]:
        session = await runner.session_service.create_session(app_name="bench", user_id="u")
        return [e async for e in runner.run_async(user_id="u", session_id=session.id,
                                                  new_message=message)]

    def bare() -> object:
        return asyncio.run(events())

    rg.protect(agent)  # once, as the docs do; a bare run outside guard() checks nothing

    def with_rolegate(key: str) -> object:
        with client.recorder(client.resolve(ROLE, key), stamps=rg.stamps(agent)) as run, \
                rg.guard(client, run):
            rg.record(run, asyncio.run(events()))
        return run

    def record_report(result: Any, key: str) -> object:
        with client.recorder(client.resolve(ROLE, key), stamps=rg.stamps(agent)) as run:
            rg.record(run, result)
        return run

    return bare, with_rolegate, record_report


def search(q: str) -> list[str]:
    """Search."""
    return [q]


def lookup(id: int) -> dict[str, int]:
    """Look up."""
    return {"id": id}


FRAMEWORKS = {"pydantic-ai": pydantic_ai_runs, "openai-agents": openai_agents_runs,
              "google-adk": google_adk_runs}


def measure(runs: Runs, flush: Callable[[], object], count: int,
            rounds: int) -> tuple[float, float, float]:
    """Mean seconds per run: bare, with rolegate, and record + report of a bare run's result.

    Interleaved rounds after a warm-up; record + report is timed on results of
    the bare runs just made, so it is exactly the work added after a run. Each
    rolegate round ends with `flush()`, so its traces' sending is in its time.
    """
    bare, with_rolegate, record_report = runs
    for n in range(20):
        record_report(bare(), f"warm-{n}")
        with_rolegate(f"warm-{n}")
    flush()
    spent = {"bare": 0.0, "rolegate": 0.0, "record": 0.0}
    # CPU seconds of this process (all its threads, the report sender's included),
    # not wall time: on a shared, loaded machine wall time mostly measures the queue.
    clock = time.process_time
    for r in range(rounds):
        results = []
        gc.collect()
        started = clock()
        for _ in range(count):
            results.append(bare())
        spent["bare"] += clock() - started
        # Each arm starts from a collected heap, so it pays for the collections its
        # own allocations make due. Without this a full collection made due by the
        # frameworks' allocations (~120 ms over a heap of all three frameworks) now
        # and then fell inside the record arm, whose 200 runs allocate too little to
        # need one: one such pause adds ~120 us to that arm's mean per run.
        gc.collect()
        started = clock()
        for n, result in enumerate(results):
            record_report(result, f"rec-{r}-{n}")
        flush()
        spent["record"] += clock() - started
        gc.collect()
        started = clock()
        for n in range(count):
            with_rolegate(f"job-{r}-{n}")
        flush()
        spent["rolegate"] += clock() - started
    total = count * rounds
    return spent["bare"] / total, spent["rolegate"] / total, spent["record"] / total


def main() -> None:
    """Print glue lines and per-run cost per framework."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per round and arm")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("# Glue a caller writes (docs/integrations examples, between the glue markers)")
    print("| integration | statements | lines |\n|---|---:|---:|")
    for name, page in PAGES.items():
        statements, lines = glue(page)
        print(f"| {name} | {statements} | {lines} |")
    with redis_server() as redis_url, gunicorn_router(redis_url) as url:
        headers = {"Authorization": f"Bearer {OPERATOR}"}
        requests.put(f"{url}/v1/bindings/{ROLE}", headers=headers, timeout=5, json={
            "current": "cfg_a", "candidate": "cfg_b", "gate": {
                "invariants": {"forbidden_tools": ["delete_account"]}}}).raise_for_status()
        requests.post(f"{url}/v1/bindings/{ROLE}/canary", headers=headers, timeout=5,
                      json={"share": 0.5, "reason": "bench"}).raise_for_status()
        client = Client(url, CALLER)
        print(f"\n# Per run, {args.runs} x {args.rounds} runs per arm, interleaved")
        print("| framework | bare run (us) | record + report (us) | with rolegate, guard "
              "included (us) | its cost (us) | ratio |")
        print("|---|---:|---:|---:|---:|---:|")
        try:
            for name, build in FRAMEWORKS.items():
                plain, guarded, recorded = measure(build(client), lambda: client.flush(30),
                                                   args.runs, args.rounds)
                print(f"| {name} | {plain * 1e6:.0f} | {recorded * 1e6:.1f} | "
                      f"{guarded * 1e6:.0f} | {(guarded - plain) * 1e6:.0f} | "
                      f"{guarded / plain:.3f} |", flush=True)
            sent = client.flush(30)
            stats = client.report_stats()
        finally:
            client.close()
        print(f"\nreported: {stats} (all sent: {sent})")


if __name__ == "__main__":
    main()
