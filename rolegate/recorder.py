"""Build one run's Trace as the run happens, so callers never write trace JSON by hand.

    with client.recorder(client.resolve("summarizer", job_id)) as run:
        run.tool("search", {"q": "..."}, result=hits)
        run.cost(usd=0.002, tokens=812)
        run.output(answer)

Leaving the block (normally or by an exception, which is not swallowed) builds
the Trace (rolegate/trace.py, the model the server validates with) and hands
it to the sink, once. A run that produced no non-blank output counts as
unanswered, the same rule the offline suite applies; a run left by an
exception carries it as the trace's `error` (type and message).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rolegate.run_ids import run_id_of
from rolegate.trace import Stamps, Step, Trace, declared_fields

#: The optional fields `Recorder.tool()` takes beside name, args, result and error.
STEP_FIELDS = frozenset(Step.model_fields) - {"tool", "args", "result", "error"}
#: Every key a step mapping given to `Recorder.steps()` may hold.
STEP_KEYS = frozenset(Step.model_fields)
#: Stamps validated before, by their items: integrations hand the same stamps (a new
#: dict each run) to every run of an agent, and validating them each time is wasted.
_STAMPS: dict[tuple[tuple[str, Any], ...], Stamps] = {}
MAX_CACHED_STAMPS = 256


def _stamps(value: Stamps | Mapping[str, Any]) -> Stamps:
    """`value` as Stamps, validated once per distinct set of items."""
    if isinstance(value, Stamps):
        return value
    try:
        key = tuple(value.items())
        found = _STAMPS.get(key)
    except TypeError:  # an unhashable value: the model will say what is wrong with it
        return Stamps.model_validate(value)
    if found is None:
        found = Stamps.model_validate(value)
        if len(_STAMPS) >= MAX_CACHED_STAMPS:
            _STAMPS.clear()
        _STAMPS[key] = found
    return found


#: Run ids born at assignment (`rolegate.run_ids`) a recorder already took: a resolution
#: recorded twice (a retry under one answer) gives the second run a fresh id, else its
#: trace would be a duplicate of the first and never counted. Bounded: the newest only.
_TAKEN: dict[str, None] = {}
_TAKEN_LOCK = threading.Lock()
MAX_TAKEN = 4096


def _claim(resolution: Mapping[str, Any]) -> str | None:
    """The resolution's `run_id` the first time a recorder asks for it; else None."""
    run_id = run_id_of(resolution)
    if run_id is None:
        return None
    with _TAKEN_LOCK:
        if run_id in _TAKEN:
            return None
        if len(_TAKEN) >= MAX_TAKEN:
            del _TAKEN[next(iter(_TAKEN))]  # the oldest (dicts keep insertion order)
        _TAKEN[run_id] = None
    return run_id


class Recorder:
    """Collects tool calls, cost, artifacts and the output of one run."""

    def __init__(
        self,
        resolution: Mapping[str, Any],
        stamps: Stamps | Mapping[str, Any],
        *,
        sink: Callable[[Trace], None] | None = None,
        run_id: str | None = None,
        shadow: bool = False,
        input: dict[str, Any] | None = None,
        scenario: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Start recording a run of `resolution`'s config (its shadow config if `shadow`)."""
        if shadow and not resolution.get("shadow"):
            raise ValueError(f"role {resolution.get('role')!r} has no shadow config to record")
        self.resolution = dict(resolution)
        self.stamps = _stamps(stamps)
        self.run_id = run_id or (None if shadow else _claim(resolution)) or uuid.uuid4().hex
        self.shadow = shadow
        self.sink = sink
        self.input = input
        self.scenario = scenario
        self.trace: Trace | None = None
        self._clock = clock
        self._started = clock()
        self._steps: list[dict[str, Any]] = []
        self._artifacts: list[str] = []
        self._cost_usd = 0.0
        self._tokens = 0
        self._output = ""
        self._feedback: dict[str, Any] | None = None
        self._tokens_in = 0
        self._tokens_out = 0
        self._error: dict[str, str] | None = None
        self._declared: dict[str, Any] = {}

    @property
    def config(self) -> str:
        """The config this run must use."""
        return str(self.resolution["shadow"] if self.shadow else self.resolution["config"])

    def tool(self, name: str, args: Mapping[str, Any] | None = None, *,
             result: Any = None, error: str | BaseException | None = None,
             **about: Any) -> None:
        """Record one tool call, in call order; `error` marks it failed.

        `about` takes the step's optional fields: `agent`, `parent_agent`,
        `parallel_group` (calls issued together share one), `tokens_in`,
        `tokens_out`, `latency_s` and `model` (see `rolegate.trace.Step`).
        """
        step: dict[str, Any] = {"tool": name, "args": dict(args) if args else {}}
        if result is not None:
            step["result"] = result
        if error is not None:
            step["error"] = str(error) or type(error).__name__
        if about:
            if not STEP_FIELDS.issuperset(about):
                raise TypeError(f"tool() got unknown fields {sorted(set(about) - STEP_FIELDS)}; "
                                f"known: {sorted(STEP_FIELDS)}")
            for key, value in about.items():
                if value is not None:
                    step[key] = value
        self._steps.append(step)

    def steps(self, steps: Iterable[Mapping[str, Any]]) -> None:
        """Record several tool calls at once, in call order (what the integrations use).

        Each is a mapping with `tool` and `args` and any of the fields `tool()`
        takes (`result`, `error` as text, `agent`, ...); a None value is as
        absent. One call instead of one `tool()` per call.
        """
        added = [dict(step) for step in steps]
        for step in added:  # all checked before any is kept: a refusal adds nothing
            if not STEP_KEYS.issuperset(step):
                raise TypeError(f"steps() got unknown fields {sorted(set(step) - STEP_KEYS)}; "
                                f"known: {sorted(STEP_KEYS)}")
        self._steps += added

    def cost(self, usd: float = 0.0, tokens: int = 0, *, tokens_in: int = 0,
             tokens_out: int = 0) -> None:
        """Add to the run's spend; call it once per model call, or once at the end.

        `tokens_in`/`tokens_out` (prompt and completion) count into `tokens` too.
        """
        self._cost_usd += usd
        self._tokens += tokens + tokens_in + tokens_out
        self._tokens_in += tokens_in
        self._tokens_out += tokens_out

    def fail(self, error: BaseException | str, *, kind: str | None = None) -> None:
        """Mark the run as ended abnormally: the exception's type and message.

        Leaving the `with` block by an exception does this by itself.
        """
        if isinstance(error, BaseException):
            self._error = {"type": kind or type(error).__name__, "message": str(error)[:4000]}
        else:
            self._error = {"type": kind or "Error", "message": error[:4000]}

    def output(self, text: str) -> None:
        """Set the run's final output (what the invariants read)."""
        self._output = text

    def artifact(self, path: str) -> None:
        """Record a file the run produced."""
        self._artifacts.append(str(path))

    def mark(self, **fields: Any) -> None:
        """Declare trace fields the recorder does not measure (`rolegate.trace.MEASURED_FIELDS`
        are the ones it does): `run.mark(scenario="refund-7")`, or any field added to Trace
        later, with no change here. ValueError names a measured or unknown field at once."""
        self._declared.update(declared_fields(fields))

    def feedback(self, **values: Any) -> None:
        """Attach feedback (a rating, a label) to the trace."""
        self._feedback = {**(self._feedback or {}), **values}

    def finish(self) -> Trace:
        """Build the trace and hand it to the sink; later calls return the same trace."""
        if self.trace is not None:
            return self.trace
        resolution = self.resolution
        self.trace = Trace.model_validate({
            "run_id": self.run_id,
            "role": resolution["role"],
            "config": self.config,
            "arm": "shadow" if self.shadow else resolution["arm"],
            "key": resolution.get("key", ""),
            "steps": self._steps,
            "answered": bool(self._output.strip()),
            "cost_usd": self._cost_usd,
            "tokens": self._tokens,
            "tokens_in": self._tokens_in or None,
            "tokens_out": self._tokens_out or None,
            "error": self._error,
            "latency_s": max(0.0, self._clock() - self._started),
            "artifacts": self._artifacts,
            "output_text": self._output,
            "stamps": self.stamps,
            "scenario": self.scenario,
            "feedback": self._feedback,
            "input": self.input,
            "time": time.time(),
            # Shadow runs were not routed by the rule: it picked the served arm only.
            "rule": None if self.shadow else resolution.get("rule"),
            "attributes": _attributes(resolution, self.shadow),
            **self._declared,
        })
        if self.sink is not None:
            self.sink(self.trace)
        return self.trace

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> None:
        if exc is not None and self._error is None:
            self.fail(exc)
        self.finish()


def _attributes(resolution: Mapping[str, Any], shadow: bool) -> dict[str, str] | None:
    """The job attributes a trace carries: the resolution's (the rule's and the unit's), and
    for a shadow run only the unit (`bucket_by`'s value: the same job's unit on either arm)."""
    attributes = resolution.get("attributes")
    if not shadow or not attributes:
        return attributes
    by = (resolution.get("bucketing") or {}).get("bucket_by")
    return {by: attributes[by]} if by and by in attributes else None
