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

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from gatekeeper.checks.invariants import TraceVerdict
from rolegate.trace import Trace

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


def run_span(run: ExportedRun) -> Span:
    """The run as one span: it ends when the run ended and lasts its reported latency."""
    t = run.trace
    end = t.time if t.time is not None else run.received
    end_ns = int(end * 1e9)
    start_ns = max(0, end_ns - int(t.latency_s * 1e9))
    failed = run.verdict.judged and not run.verdict.passed
    status = Status(code=Status.STATUS_CODE_ERROR,
                    message=_failure_message(run.verdict)) if failed else Status()
    return Span(trace_id=trace_id(t), span_id=span_id(run), name=f"rolegate.run {t.role}",
                kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=start_ns,
                end_time_unix_nano=end_ns, attributes=_key_values(run_attributes(run)),
                status=status)


def export_request(runs: Sequence[ExportedRun], version: str = "") -> ExportTraceServiceRequest:
    """One ExportTraceServiceRequest holding a span per run, under rolegate's resource."""
    resource = Resource(attributes=_key_values({"service.name": SERVICE_NAME}))
    scope = InstrumentationScope(name=SCOPE, version=version)
    spans = [run_span(run) for run in runs]
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=resource, scope_spans=[ScopeSpans(scope=scope, spans=spans)])])


def _failure_message(verdict: TraceVerdict) -> str:
    failed = list(verdict.failed_criteria)
    return "failed: " + ", ".join(failed) if failed else "failed"


def _digest(size: int, *parts: str) -> bytes:
    raw = hashlib.blake2b("\0".join(parts).encode(), digest_size=size).digest()
    # OTLP calls an all-zero id invalid; a hash lands there once in 2^64 at worst.
    return raw if any(raw) else b"\x01" * size


def _key_values(attrs: dict[str, AttrValue]) -> list[KeyValue]:
    return [KeyValue(key=key, value=_any(value)) for key, value in attrs.items()]


def _any(value: AttrValue) -> AnyValue:
    # bool before int: a bool is an int in Python.
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    return AnyValue(array_value=ArrayValue(values=[AnyValue(string_value=s) for s in value]))
