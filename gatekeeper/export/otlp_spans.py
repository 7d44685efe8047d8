"""A stored run as an OTLP span, and a batch of them as one ExportTraceServiceRequest.

Pure: data in, protobuf messages out (the OpenTelemetry project's own generated
classes, `opentelemetry-proto`, which the router already uses to read OTLP in).

One span per run, named `rolegate.run <role>`, carrying where the run belongs and
what rolegate made of it (`rolegate.role`, `.config`, `.arm`, `.stage`,
`.verdict`, `.failed_invariants`, ...). Its trace id is the run id when the run
came in over OTLP (a run's id is its trace id there), so the span lands in the
team's own trace in Langfuse, Phoenix or Tempo; any other run id is hashed
into one. Span ids are hashed from the stored entry, so a batch sent twice (a
retry after a lost answer, a restart) carries the same ids and a collector that
deduplicates keeps one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from gatekeeper.checks.invariants import TraceVerdict
from rolegate.trace import Step, Trace

SCOPE = "rolegate.export"
SERVICE_NAME = "rolegate"
#: A run id that already is an OTLP trace id (how `POST /v1/traces` names OTLP runs).
_TRACE_ID = re.compile(r"[0-9a-f]{32}")

AttrValue = str | bool | int | float | Sequence[str]


@dataclass(frozen=True)
class ExportedRun:
    """One stored run as the exporter read it: the trace, its verdict, where and when it landed."""

    stream_id: str
    received: float
    trace: Trace
    verdict: TraceVerdict
    #: The role's stage when the run arrived (None when the role's history is gone).
    stage: str | None


def verdict_word(verdict: TraceVerdict) -> str:
    """`pass`, `fail`, or `unjudged` for a run whose record the gate cannot judge."""
    if not verdict.judged:
        return "unjudged"
    return "pass" if verdict.passed else "fail"


def trace_id(trace: Trace) -> bytes:
    """The run's OTLP trace id: its run id when that is one, else a hash of role and run id."""
    if _TRACE_ID.fullmatch(trace.run_id) and trace.run_id != "0" * 32:
        return bytes.fromhex(trace.run_id)
    return _digest(16, "rolegate.run", trace.role, trace.run_id)


def span_id(run: ExportedRun) -> bytes:
    """A span id fixed by the stored entry, so every export of it carries the same id."""
    return _digest(8, "rolegate.span", run.trace.role, run.trace.config, run.trace.arm,
                   run.stream_id)


def run_attributes(run: ExportedRun) -> dict[str, AttrValue]:
    """The span's attributes: placement, stage, verdict, failed invariants and the run's figures."""
    t, v = run.trace, run.verdict
    attrs: dict[str, AttrValue] = {
        "rolegate.role": t.role,
        "rolegate.config": t.config,
        "rolegate.arm": t.arm,
        "rolegate.verdict": verdict_word(v),
        "rolegate.failed_invariants": list(v.failed_criteria),
        "rolegate.blocking": v.blocking,
        "rolegate.run_id": t.run_id,
        "rolegate.stream_id": run.stream_id,
        "rolegate.answered": t.answered,
        "rolegate.step_count": t.step_count,
        "rolegate.tool_errors": t.tool_errors,
        "rolegate.cost_usd": t.cost_usd,
        "rolegate.latency_s": t.latency_s,
        "rolegate.model_id": t.stamps.model_id,
        "rolegate.agent_version": t.stamps.agent_version,
    }
    if run.stage is not None:
        attrs["rolegate.stage"] = run.stage
    optional: dict[str, AttrValue | None] = {
        "rolegate.key": t.key or None,
        "rolegate.reporter": t.reporter,
        "rolegate.rule": t.rule,
        "rolegate.forbidden_tools": list(v.forbidden) or None,
        "rolegate.required_tools_missing": list(v.required_lost) or None,
        "rolegate.missing_artifacts": list(v.missing_artifacts) or None,
        "rolegate.tools": list(t.tools) or None,
        "rolegate.error.type": t.error.type if t.error is not None else None,
        "gen_ai.usage.input_tokens": t.tokens_in,
        "gen_ai.usage.output_tokens": t.tokens_out,
    }
    attrs.update({k: value for k, value in optional.items() if value is not None})
    return attrs


def fill_span(span: Span, run: ExportedRun) -> Span:
    """Write the run into `span`: it ends when the run ended and lasts its reported latency.

    Filled in place (a span added to its batch, attributes added to it): building
    messages apart and handing them over copies each one, which was most of the cost.
    """
    t = run.trace
    end = t.time if t.time is not None else run.received
    end_ns = int(end * 1e9)
    span.trace_id = trace_id(t)
    span.span_id = span_id(run)
    span.name = f"rolegate.run {t.role}"
    span.kind = Span.SPAN_KIND_INTERNAL
    span.start_time_unix_nano = max(0, end_ns - int(t.latency_s * 1e9))
    span.end_time_unix_nano = end_ns
    _add_attributes(span.attributes, run_attributes(run))
    if run.verdict.judged and not run.verdict.passed:
        span.status.code = Status.STATUS_CODE_ERROR
        span.status.message = _failure_message(run.verdict)
    _add_steps(span, run, span.start_time_unix_nano)
    return span


def step_attributes(index: int, step: Step, forbidden: frozenset[str]) -> dict[str, AttrValue]:
    """One tool call as an event's attributes: which tool, in what order, how it went.

    Never its arguments or result: those stay in rolegate (a collector is often
    another team's or vendor's system); the step says what was called, not with what.
    """
    attrs: dict[str, AttrValue] = {"gen_ai.tool.name": step.tool, "rolegate.step.index": index,
                                   "rolegate.step.failed": step.error is not None}
    if step.tool in forbidden:
        attrs["rolegate.step.forbidden"] = True
    optional: dict[str, AttrValue | None] = {
        "rolegate.step.offered": step.offered,
        "gen_ai.agent.name": step.agent,
        "rolegate.step.parallel_group": step.parallel_group,
        "rolegate.step.latency_s": step.latency_s,
    }
    attrs.update({k: value for k, value in optional.items() if value is not None})
    return attrs


def _add_steps(span: Span, run: ExportedRun, start_ns: int) -> None:
    # Each call an event, stamped where it would fall if the calls ran one after the
    # other for their reported latencies (the stored run keeps no clock per call).
    forbidden = frozenset(run.verdict.forbidden)
    at = start_ns
    for index, step in enumerate(run.trace.steps or ()):
        event = span.events.add()
        event.name = "rolegate.step"
        event.time_unix_nano = at
        _add_attributes(event.attributes, step_attributes(index, step, forbidden))
        at += int((step.latency_s or 0.0) * 1e9)


def export_request(runs: Sequence[ExportedRun], version: str = "") -> ExportTraceServiceRequest:
    """One ExportTraceServiceRequest holding a span per run, under rolegate's resource."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    _add_attributes(resource_spans.resource.attributes, {"service.name": SERVICE_NAME})
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = SCOPE
    scope_spans.scope.version = version
    for run in runs:
        fill_span(scope_spans.spans.add(), run)
    return request


def _failure_message(verdict: TraceVerdict) -> str:
    failed = list(verdict.failed_criteria)
    return "failed: " + ", ".join(failed) if failed else "failed"


def _digest(size: int, *parts: str) -> bytes:
    raw = hashlib.blake2b("\0".join(parts).encode(), digest_size=size).digest()
    # OTLP calls an all-zero id invalid; a hash lands there once in 2^64 at worst.
    return raw if any(raw) else b"\x01" * size


def _add_attributes(into: Any, attrs: dict[str, AttrValue]) -> None:
    for key, value in attrs.items():
        pair = into.add()
        pair.key = key
        target = pair.value
        # bool before int: a bool is an int in Python.
        if isinstance(value, bool):
            target.bool_value = value
        elif isinstance(value, int):
            target.int_value = value
        elif isinstance(value, float):
            target.double_value = value
        elif isinstance(value, str):
            target.string_value = value
        else:
            target.array_value.SetInParent()  # an empty list is still a list, not no value
            items = target.array_value.values
            for item in value:
                items.add().string_value = item
