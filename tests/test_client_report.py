"""The client's trace reporting and recorder against a live router and the real Redis."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from gatekeeper.store.traces import TraceStore
from rolegate.client import Client
from rolegate.recorder import Recorder
from tests.conftest import CALLER
from tests.live import (
    LiveRouter,
    put_role,
    router,  # noqa: F401  (the pytest fixture the tests below take)
    wait_for,
)

STAMPS = {"agent_version": "agent-1", "instruction_hash": "i1", "model_id": "m1",
          "tool_schema_hash": "t1"}


def a_trace(run_id: str, role: str = "r", config: str = "a") -> dict[str, Any]:
    """A minimal valid trace of the current arm."""
    return {"run_id": run_id, "role": role, "config": config, "arm": "current",
            "tools": ["search"], "output_text": "done", "stamps": STAMPS}


def stored_run_ids(redis_conn: redis.Redis, role: str = "r", config: str = "a") -> list[str]:
    """Every run id in the (role, config, current) stream, in arrival order (repeats kept)."""
    return [s.trace.run_id for s in TraceStore(redis_conn).read(role, config, "current")]


def test_recorder_builds_the_trace_as_the_run_happens(router: LiveRouter,
                                                      redis_conn: redis.Redis) -> None:
    """Tool calls in order, errors, cost, output and artifacts become the stored trace."""
    put_role(router, "r", current="a", candidate="b", stage="shadow")
    with Client(router.url, CALLER, stamps=STAMPS) as client:
        resolution = client.resolve("r", "job-1")
        with client.recorder(resolution, input={"doc": 7}) as run:
            assert run.config == "a"
            run.tool("search", {"q": "x"}, result=["hit"])
            run.tool("fetch", {"url": "u"}, error=TimeoutError("slow"))
            run.cost(usd=0.01, tokens=100)
            run.cost(usd=0.02, tokens=50)
            run.artifact("out/report.md")
            run.output("| a | b |\n|---|---|")
        with pytest.raises(RuntimeError, match="agent crashed"), \
                client.recorder(resolution, shadow=True) as crashed:
            crashed.tool("search")
            raise RuntimeError("agent crashed")
        assert client.flush(10)
    trace = run.trace
    assert trace is not None and trace.tools == ("search", "fetch")
    assert (trace.step_count, trace.tool_errors, trace.tokens) == (2, 1, 150)
    assert trace.cost_usd == pytest.approx(0.03) and trace.answered
    assert (trace.arm, trace.config, trace.key) == ("current", "a", "job-1")
    assert trace.steps is not None and trace.steps[1].error == "slow"
    store = TraceStore(redis_conn)
    stored = store.lookup("r", run.run_id).trace
    # Stored as recorded, stamped with the name of the token that reported it.
    assert stored == trace.model_copy(update={"reporter": "caller-ef463420"})
    shadow = store.lookup("r", crashed.run_id).trace
    assert (shadow.arm, shadow.config, shadow.answered) == ("shadow", "b", False)
    assert client.report_stats().sent == 2


def test_recorder_refuses_a_shadow_run_without_a_shadow() -> None:
    """Recording a shadow run of a role that has no shadow config is refused."""
    resolution = {"role": "r", "config": "a", "arm": "current", "shadow": None, "key": "k"}
    with pytest.raises(ValueError, match="no shadow"):
        Recorder(resolution, STAMPS, shadow=True)


def test_steps_records_several_calls_at_once() -> None:
    """run.steps() keeps calls in order with their fields; an unknown field adds none of them."""
    resolution = {"role": "r", "config": "a", "arm": "current", "key": "k"}
    run = Recorder(resolution, STAMPS)
    run.tool("plan")
    run.steps([{"tool": "search", "args": {"q": "x"}, "result": ["hit"], "agent": "triage"},
               {"tool": "fetch", "args": {}, "error": "timeout", "parallel_group": "g"}])
    with pytest.raises(TypeError, match="unknown fields"):
        run.steps([{"tool": "ok", "args": {}}, {"tool": "bad", "args": {}, "agnet": "typo"}])
    trace = run.finish()
    assert trace.tools == ("plan", "search", "fetch") and trace.tool_errors == 1
    assert trace.steps is not None
    assert (trace.steps[1].result, trace.steps[1].agent) == (["hit"], "triage")
    assert (trace.steps[2].error, trace.steps[2].parallel_group) == ("timeout", "g")
    # The same stamps given as a new dict each run are validated once and shared.
    assert Recorder(resolution, dict(STAMPS)).stamps is run.stamps


def test_reporting_survives_a_router_restart(router: LiveRouter, redis_conn: redis.Redis) -> None:
    """Traces reported before, during and after a router restart are all stored, once each."""
    put_role(router, "r", current="a")
    client = Client(router.url, CALLER, max_age=None, flush_timeout=20, report_attempts=2)
    sent = [f"run-{n}" for n in range(300)]
    for run_id in sent[:100]:
        client.report(a_trace(run_id))
    router.stop()
    started = time.monotonic()
    for run_id in sent[100:200]:
        client.report(a_trace(run_id))
    assert time.monotonic() - started < 0.5  # the agent is not held up by the outage
    # Let a batch fail outright, so it is the kept-and-retried path that delivers it.
    wait_for(lambda: client.report_stats().failed_attempts > 0)
    router.start()
    for run_id in sent[200:]:
        client.report(a_trace(run_id))
    client.close()  # flushes
    stats = client.report_stats()
    assert (stats.sent, stats.dropped, stats.unsent, stats.rejected, stats.queued) == (
        300, 0, 0, 0, 0)
    stored = stored_run_ids(redis_conn)
    assert sorted(stored) == sorted(sent)  # none lost, none twice


class DropFirstAnswerProxy:
    """A loopback TCP proxy that forwards every request but swallows the first trace answer.

    The router stores that batch and answers; the client never hears it, so it
    retries the same run ids: exactly the case run_id idempotency exists for.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.swallowed = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                downstream, _ = self.listener.accept()
            except TimeoutError:
                continue
            with downstream:
                self._relay(downstream)

    def _relay(self, downstream: socket.socket) -> None:
        downstream.settimeout(5)
        request = _read_request(downstream)
        with socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5) as upstream:
            # Ask the router to close after answering, so its answer ends at EOF.
            head, _, body = request.partition(b"\r\n\r\n")
            upstream.sendall(head + b"\r\nConnection: close\r\n\r\n" + body)
            answer = b"".join(iter(lambda: upstream.recv(65536), b""))
        if request.startswith(b"POST /v1/traces") and self.swallowed == 0:
            self.swallowed += 1
            return  # close without a word
        downstream.sendall(answer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.listener.close()


def _read_request(connection: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        body += connection.recv(65536)
    # Drop the client's own Connection header; the proxy sets its own.
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


@pytest.fixture
def proxy(router: LiveRouter) -> Iterator[DropFirstAnswerProxy]:  # noqa: F811
    """A proxy in front of the live router that loses the first answer to a trace batch."""
    relay = DropFirstAnswerProxy(router.port)
    yield relay
    relay.close()


def test_a_lost_answer_is_retried_and_not_counted_twice(
        router: LiveRouter, proxy: DropFirstAnswerProxy, redis_conn: redis.Redis) -> None:
    """When the router stored a batch but its answer was lost, the retry is stored once."""
    put_role(router, "r", current="a")
    # Polling: the proxy relays one connection at a time, and a watch would hold it.
    with Client(f"http://127.0.0.1:{proxy.port}", CALLER, subscribe=False) as client:
        for n in range(3):
            client.report(a_trace(f"lost-{n}"))
        assert client.flush(10)
        stats = client.report_stats()
    assert proxy.swallowed == 1
    assert sorted(stored_run_ids(redis_conn)) == ["lost-0", "lost-1", "lost-2"]
    assert stats.sent == 3 and stats.duplicates >= 1


def test_a_full_queue_drops_the_oldest_and_counts(router: LiveRouter,
                                                  redis_conn: redis.Redis) -> None:
    """With the router down a full queue drops its oldest traces, counts them, sends the rest."""
    put_role(router, "r", current="a")
    with Client(router.url, CALLER) as first:
        bootstrap = first.snapshot()
    router.stop()
    client = Client(router.url, CALLER, bootstrap=bootstrap, max_queue=5, batch_size=1,
                    report_attempts=1)
    client.report(a_trace("t0"))
    # t0 is now the batch in flight (retried, never dropped); the queue holds 5.
    wait_for(lambda: client.report_stats().failed_attempts > 0)
    for n in range(1, 8):
        client.report(a_trace(f"t{n}"))
    stats = client.report_stats()
    assert (stats.dropped, stats.queued) == (2, 6)
    router.start()
    assert client.flush(15)
    client.close()
    assert stored_run_ids(redis_conn) == ["t0", "t3", "t4", "t5", "t6", "t7"]
    assert client.report_stats().sent == 6


def test_close_gives_up_after_flush_timeout(router: LiveRouter) -> None:
    """close() with the router down returns after flush_timeout and counts what stayed unsent."""
    put_role(router, "r", current="a")
    client = Client(router.url, CALLER, flush_timeout=0.5, report_attempts=1)
    router.stop()
    for n in range(3):
        client.report(a_trace(f"u{n}"))
    started = time.monotonic()
    client.close()
    assert time.monotonic() - started < 3.0
    stats = client.report_stats()
    assert (stats.unsent, stats.sent) == (3, 0)
    with pytest.raises(RuntimeError, match="closed"):
        client.report(a_trace("late"))


def test_a_malformed_trace_fails_in_the_caller(router: LiveRouter) -> None:
    """report() validates a dict at once, so a malformed trace never reaches the queue."""
    put_role(router, "r", current="a")
    with Client(router.url, CALLER) as client:
        with pytest.raises(ValueError):
            client.report({"run_id": "x", "role": "r"})
        assert client.report_stats().queued == 0


def test_the_documented_three_lines_work(router: LiveRouter, redis_conn: redis.Redis) -> None:
    """The adoption example in docs/client.md runs as written and reports its trace."""
    put_role(router, "summarizer", current="a")
    text = (Path(__file__).resolve().parent.parent / "docs" / "client.md").read_text()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(block.strip().splitlines()) == 3

    def my_agent(config: str, job_id: str, on_tool: Any) -> str:
        on_tool("search", {"q": job_id})
        return f"answer from {config}"

    scope: dict[str, Any] = {"Client": Client, "token": CALLER, "STAMPS": STAMPS,
                             "job_id": "job-9", "my_agent": my_agent}
    exec(block.replace("http://rolegate:8000", router.url), scope)  # noqa: S102
    scope["client"].close()
    stored = [s.trace for s in TraceStore(redis_conn).read("summarizer", "a", "current")]
    assert [(t.tools, t.key, t.output_text) for t in stored] == [
        (("search",), "job-9", "answer from a")]


def test_an_agent_that_exits_without_close_still_sends(router: LiveRouter,
                                                       redis_conn: redis.Redis) -> None:
    """Traces queued by a process that exits without close() are sent on the way out."""
    put_role(router, "r", current="a")
    script = (
        "import sys\n"
        "from rolegate.client import Client\n"
        "client = Client(sys.argv[1], sys.argv[2])\n"
        "for n in range(5):\n"
        f"    client.report({{'run_id': f'exit-{{n}}', 'role': 'r', 'config': 'a',"
        f" 'arm': 'current', 'stamps': {STAMPS!r}}})\n"
    )
    subprocess.run([sys.executable, "-c", script, router.url, CALLER], check=True, timeout=60)
    assert sorted(stored_run_ids(redis_conn)) == [f"exit-{n}" for n in range(5)]
