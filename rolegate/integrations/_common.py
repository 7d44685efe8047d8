"""What every framework integration shares: stamp hashes, JSON-safe values, and the call log.

Frameworks report a run as a flat history (messages, items, events) in which a
tool call and its result are separate entries tied by a call id, results may
come back in any order, and a call may have no result at all (the run was
aborted). `CallLog` collects calls in the order they were issued and matches
results to them by id, so each integration only translates its own history.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from pydantic_core import from_json, to_jsonable_python

from rolegate.recorder import Recorder

#: The error a call gets when the run ended before the call returned.
NO_RESULT = "no result: the run ended before the call returned"
#: What the model is told instead of a refused tool's result, in every framework.
REFUSED = "refused by rolegate: this tool is not allowed for the role"
#: The error of a call to a tool the agent does not offer (the model made the name up, or
#: the config no longer offers it): the attempt is kept as a failed step, evidence the
#: gate and the tripwire read like any other call.
UNOFFERED = "not offered: the agent does not offer this tool"
#: Set on a recorder once an integration filled it, so a second record() is a no-op.
RECORDED = "_rolegate_recorded"


def digest(value: Any) -> str:
    """A short, stable hash of a JSON-able value (key order and whitespace do not matter)."""
    text = json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


#: Types that are JSON data as they are (the common tool results and arguments).
_PLAIN = frozenset({str, int, float, bool, type(None)})


def jsonable(value: Any) -> Any:
    """`value` as plain JSON data: models and dataclasses as their fields, anything else as str."""
    if type(value) in _PLAIN:
        return value
    return to_jsonable_python(value, fallback=repr, serialize_unknown=True)


def callable_name(value: Any) -> str:
    """A stable stand-in for a callable (dynamic instructions): its qualified name."""
    module = getattr(value, "__module__", "") or ""
    name = getattr(value, "__qualname__", None) or type(value).__name__
    return f"{module}.{name}" if module else str(name)


#: id(agent) -> (the agent, the objects its stamps were computed from, the stamps), the
#: most recently used last. Agents are often unhashable (dataclasses, pydantic models),
#: so the key is the id and the entry holds the agent itself: an id is never reused
#: while its entry lives.
_STAMPS: OrderedDict[int, tuple[Any, tuple[Any, ...], dict[str, str]]] = OrderedDict()
MAX_CACHED_AGENTS = 128
_STAMPS_LOCK = threading.Lock()


def cached(agent: Any, parts: tuple[Any, ...], compute: Callable[[], dict[str, str]]
           ) -> dict[str, str]:
    """`compute()`, reused while each object in `parts` is the very object it was last time.

    Hashing an agent's instructions and tool schemas costs more than the rest of
    recording a run; an agent is rebuilt or reassigned (new objects) far more
    often than mutated in place, so identity of the parts stands in for equality.
    """
    with _STAMPS_LOCK:
        hit = _STAMPS.get(id(agent))
        if hit is not None and hit[0] is agent and len(hit[1]) == len(parts) and all(
                a is b for a, b in zip(hit[1], parts, strict=True)):
            _STAMPS.move_to_end(id(agent))
            return dict(hit[2])
    found = compute()
    with _STAMPS_LOCK:
        _STAMPS[id(agent)] = (agent, parts, found)
        _STAMPS.move_to_end(id(agent))
        while len(_STAMPS) > MAX_CACHED_AGENTS:
            _STAMPS.popitem(last=False)
    return dict(found)


def stamps(*, model_id: str, instructions: Any, tools: Any, agent_version: str) -> dict[str, str]:
    """The four stamps of a run, the hashes computed from what the framework's agent holds."""
    return {"agent_version": agent_version or "unknown", "model_id": model_id or "unknown",
            "instruction_hash": digest(instructions), "tool_schema_hash": digest(tools)}


class CallLog:
    """Tool calls in issue order, with results matched by call id (any completion order).

    Each call is kept as the trace step it becomes (a dict with `tool`, `args` and
    the optional Step fields), so filling the recorder copies nothing.
    """

    __slots__ = ("_done", "by_id", "steps", "tokens_in", "tokens_out")

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.tokens_in = 0
        self.tokens_out = 0
        #: id() of each step that got its result or error (a None result is a result).
        self._done: set[int] = set()

    def issue(self, call_id: str | None, tool: str, args: Any,
              **details: Any) -> dict[str, Any]:
        """Add a call the model issued; `args` may be a JSON string or a mapping.

        `details` are the step's optional fields (`agent`, `parent_agent`,
        `parallel_group`, `model`, `tokens_in`, `tokens_out`); None ones are left out.
        """
        step = {"tool": tool, "args": parse_args(args)}
        for key, value in details.items():
            if value is not None:
                step[key] = value
        self.steps.append(step)
        if call_id:
            self.by_id[call_id] = step
        return step

    def complete(self, call_id: str | None, *, result: Any = None,
                 error: str | None = None) -> dict[str, Any] | None:
        """Attach a result (or an error) to the call with `call_id`; None if no such call."""
        step = self.by_id.get(call_id) if call_id else None
        if step is None:
            return None
        self._done.add(id(step))
        if error is not None:
            step["error"] = error or "error"
            if error == UNOFFERED:  # the integrations' own answer: the agent lacks the tool
                step["offered"] = False
        else:
            value = jsonable(result)
            if value is not None:
                step["result"] = value
        return step

    def usage(self, tokens_in: int | None, tokens_out: int | None) -> None:
        """Add one model turn's tokens to the run's totals."""
        self.tokens_in += tokens_in or 0
        self.tokens_out += tokens_out or 0

    def fill(self, run: Any, *, output: Any = None, error: BaseException | None = None,
             given: Any = None) -> None:
        """Write the calls, tokens, output, input and run error into the recorder `run`, once.

        When the run aborted (`error`), a call that never returned gets NO_RESULT
        as its error. `given` is what the run was asked (`run_input`); it becomes
        the trace's `input` unless the caller set one (`recorder(..., input=...)`).
        """
        if getattr(run, RECORDED, False):
            return
        setattr(run, RECORDED, True)
        if given is not None and hasattr(run, "input") and run.input is None:
            run.input = run_input(given)
        if error is not None:
            done = self._done
            for step in self.steps:
                if id(step) not in done and "error" not in step:
                    step["error"] = NO_RESULT
        if isinstance(run, Recorder):
            run.steps(self.steps)
        else:  # any object with the recorder's tool() will do
            for step in self.steps:
                fields = dict(step)
                run.tool(fields.pop("tool"), fields.pop("args"), **fields)
        run.cost(tokens_in=self.tokens_in, tokens_out=self.tokens_out)
        if output is not None:
            run.output(output if isinstance(output, str) else
                       json.dumps(jsonable(output), ensure_ascii=False))
        if error is not None:
            run.fail(error)


def run_input(given: Any) -> dict[str, Any] | None:
    """What a run was asked, as the trace's `input` object: {"prompt": text} for one text,
    {"messages": [...]} for a list of messages or parts, the mapping itself for a mapping.

    The online judge reads it as the run's INPUT; so does a replay of the case.
    """
    if given is None:
        return None
    if isinstance(given, str):
        return {"prompt": given}
    value = jsonable(given)
    if isinstance(value, dict):
        return value
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        return {"prompt": value[0]}
    return {"messages": value if isinstance(value, list) else [value]}


def parse_args(args: Any) -> dict[str, Any]:
    """Tool arguments as a dict: JSON text is parsed; a non-object is kept under "arguments"."""
    if args is None or args == "":
        return {}
    if isinstance(args, str):
        try:
            args = from_json(args)  # pydantic-core's parser: ~6x json.loads on small objects
        except ValueError:
            return {"arguments": args}
        if type(args) is dict:
            return args  # parsed JSON: string keys and JSON values already
    if isinstance(args, Mapping):
        return {str(k): v if type(v) in _PLAIN else jsonable(v) for k, v in args.items()}
    return {"arguments": jsonable(args)}


def first(items: Iterable[Any], predicate: Callable[[Any], bool]) -> Any:
    """The first item satisfying `predicate`, else None."""
    return next((item for item in items if predicate(item)), None)


@dataclass
class Active:
    """The run a guard serves: its client and recorder, and what the framework hid from it."""

    client: Any
    run: Any
    #: call id -> error, for failures the framework's history does not mark as errors.
    errors: dict[str, str] = field(default_factory=dict)
    #: (call id, tool, args, agent) of each call a hook saw, for calls a failed run's
    #: history lost: the one in flight when the run aborted.
    seen: list[tuple[str, str, Any, str | None]] = field(default_factory=list)
    #: call id -> result, where a hook sees results (ADK), for the same reason.
    results: dict[str, Any] = field(default_factory=dict)
    #: The framework's live history of the run, where a hook sees it (pydantic-ai).
    history: Any = None
    #: The agent serving the run, where a hook sees it.
    agent: str | None = None
    #: What the run was asked, where only a hook sees it (ADK's user content).
    given: Any = None
    #: Every tool name the agent held before rolegate hid any, where a hook sees the
    #: list (pydantic-ai): a call outside it is unoffered, not refused.
    offered: set[str] | None = None

    def allowed(self, tool: str) -> bool:
        """Whether the run's role may call `tool` (the client's answer)."""
        return bool(self.client.allowed(self.run.resolution, tool))


#: Where `Guarding` leaves its Active on the recorder, for record() after the block.
ACTIVE_ATTRIBUTE = "_rolegate_active"
#: The run whose tool calls the installed hooks check; set by `Guarding`.
ACTIVE: ContextVar[Active | None] = ContextVar("rolegate_active_run", default=None)


class Guarding:
    """Context manager: the hooks a `protect()` installed check tool calls against this run.

    On an exception, `on_abort(run, error)` records what the run did before the
    error leaves the block (the recorder then reports it with the run error).
    """

    def __init__(self, client: Any, run: Any,
                 on_abort: Callable[[Active, BaseException], None] | None = None) -> None:
        self.active = Active(client, run)
        setattr(run, ACTIVE_ATTRIBUTE, self.active)
        self.on_abort = on_abort
        self._token: Token[Active | None] | None = None

    def __enter__(self) -> Active:
        self._token = ACTIVE.set(self.active)
        return self.active

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._token is not None:
            ACTIVE.reset(self._token)
            self._token = None
        if error is not None and self.on_abort is not None:
            self.on_abort(self.active, error)
