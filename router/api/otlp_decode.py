"""OTLP/HTTP trace bodies (protobuf or JSON) in, `rolegate.spans.Span` records out.

The protobuf body is an `ExportTraceServiceRequest`, decoded with the
OpenTelemetry project's own generated classes (opentelemetry-proto), so the wire
format is theirs, not ours. The JSON body is OTLP's JSON encoding of the same
message, which differs from protobuf's canonical JSON where it matters here (ids
are hex, not base64; 64-bit integers may be strings), so it is read by hand, and
every problem names where it is (`resourceSpans[0].scopeSpans[1].spans[2].traceId`).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from rolegate.spans import Span

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
#: OTLP's status code for a failed span (STATUS_CODE_ERROR), the same in both encodings.
STATUS_ERROR = Status.STATUS_CODE_ERROR
#: Attribute values nest (arrays, key-value lists); deeper than this is not telemetry.
MAX_DEPTH = 16


class BadOtlp(ValueError):
    """The body is not a readable OTLP trace export; the message says where."""


def inflate(raw: bytes, encoding: str, limit: int) -> bytes:
    """The body with its Content-Encoding (gzip, deflate or none) undone, at most `limit` bytes.

    Raises BadOtlp for an unknown encoding or a broken stream, and OverflowError
    when the decompressed body would pass `limit`.
    """
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding not in ("gzip", "deflate"):
        raise BadOtlp(f"Content-Encoding {encoding!r} is not supported (gzip, deflate)")
    inflater = zlib.decompressobj(zlib.MAX_WBITS | (16 if encoding == "gzip" else 0))
    try:
        body = inflater.decompress(raw, limit + 1)
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise BadOtlp(f"the {encoding} body does not decompress: {exc}") from exc
    if len(body) > limit or inflater.unconsumed_tail:
        raise OverflowError(limit)
    return body


def from_protobuf(raw: bytes) -> list[Span]:
    """The spans of a protobuf `ExportTraceServiceRequest`."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(raw)
    except DecodeError as exc:
        raise BadOtlp(f"the body is not a protobuf ExportTraceServiceRequest: {exc}") from exc
    spans = []
    for r, resource_spans in enumerate(request.resource_spans):
        resource = _proto_attributes(resource_spans.resource.attributes,
                                     f"resourceSpans[{r}].resource")
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            for n, span in enumerate(scope_spans.spans):
                where = f"resourceSpans[{r}].scopeSpans[{s}].spans[{n}]"
                spans.append(Span(
                    trace_id=_id(span.trace_id, 16, f"{where}.traceId"),
                    span_id=_id(span.span_id, 8, f"{where}.spanId"),
                    parent_id=_id(span.parent_span_id, 8, f"{where}.parentSpanId",
                                  optional=True) or None,
                    name=span.name, start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    attributes=_proto_attributes(span.attributes, where),
                    error=span.status.code == STATUS_ERROR,
                    status_message=span.status.message, resource=resource))
    return spans


def _id(value: bytes, size: int, where: str, *, optional: bool = False) -> str:
    """An id as lowercase hex; OTLP calls an all-zero or missing id invalid ("" if optional)."""
    if optional and not value:
        return ""
    if len(value) != size or not any(value):
        raise BadOtlp(f"{where}: expected {size} bytes, not all zero")
    return value.hex()


def _proto_attributes(pairs: Any, where: str) -> dict[str, Any]:
    return {pair.key: _proto_value(pair.value, f"{where}.attributes[{pair.key!r}]", 0)
            for pair in pairs}


def _proto_value(value: AnyValue, where: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise BadOtlp(f"{where}: nested deeper than {MAX_DEPTH} levels")
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_proto_value(v, where, depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        entries: list[KeyValue] = list(value.kvlist_value.values)
        return {kv.key: _proto_value(kv.value, where, depth + 1) for kv in entries}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None


def from_json(body: Any) -> list[Span]:
    """The spans of an OTLP JSON body (`{"resourceSpans": [...]}`), already parsed."""
    spans = []
    for r, resource_spans in enumerate(_list(body, "resourceSpans", "")):
        here = f"resourceSpans[{r}]"
        resource_spans = _object(resource_spans, here)  # [[null]] is a 400, not a 500
        resource = _json_attributes(_object(resource_spans.get("resource", {}),
                                            f"{here}.resource"), f"{here}.resource")
        for s, scope_spans in enumerate(_list(resource_spans, "scopeSpans", here)):
            for n, span in enumerate(_list(scope_spans, "spans", f"{here}.scopeSpans[{s}]")):
                where = f"{here}.scopeSpans[{s}].spans[{n}]"
                span = _object(span, where)
                status = _object(span.get("status") or {}, f"{where}.status")
                spans.append(Span(
                    trace_id=_hex_id(span.get("traceId"), 16, f"{where}.traceId"),
                    span_id=_hex_id(span.get("spanId"), 8, f"{where}.spanId"),
                    parent_id=_hex_id(span.get("parentSpanId") or "", 8,
                                      f"{where}.parentSpanId", optional=True) or None,
                    name=_string(span.get("name", ""), f"{where}.name"),
                    start_ns=_uint(span.get("startTimeUnixNano", 0), f"{where}.startTimeUnixNano"),
                    end_ns=_uint(span.get("endTimeUnixNano", 0), f"{where}.endTimeUnixNano"),
                    attributes=_json_attributes(span, where),
                    error=status.get("code") in (STATUS_ERROR, "STATUS_CODE_ERROR"),
                    status_message=_string(status.get("message", ""), f"{where}.status.message"),
                    resource=resource))
    return spans


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadOtlp(f"{where or 'the body'}: expected an object, got {type(value).__name__}")
    return value


def _list(parent: Any, key: str, where: str) -> list[Any]:
    value = _object(parent, where).get(key, [])
    if not isinstance(value, list):
        raise BadOtlp(f"{where + '.' if where else ''}{key}: expected a list")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise BadOtlp(f"{where}: expected a string")
    return value


def _uint(value: Any, where: str) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise BadOtlp(f"{where}: expected a non-negative integer (or its decimal string)")


def _hex_id(value: Any, size: int, where: str, *, optional: bool = False) -> str:
    if optional and value == "":
        return ""
    if not isinstance(value, str) or len(value) != 2 * size:
        raise BadOtlp(f"{where}: expected {2 * size} hex digits")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise BadOtlp(f"{where}: expected {2 * size} hex digits") from None
    return _id(raw, size, where)


def _json_attributes(holder: Mapping[str, Any], where: str) -> dict[str, Any]:
    found = {}
    for index, pair in enumerate(_list(holder, "attributes", where)):
        pair = _object(pair, f"{where}.attributes[{index}]")
        key = _string(pair.get("key"), f"{where}.attributes[{index}].key")
        found[key] = _json_value(pair.get("value") or {}, f"{where}.attributes[{key!r}]", 0)
    return found


def _json_value(value: Any, where: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise BadOtlp(f"{where}: nested deeper than {MAX_DEPTH} levels")
    value = _object(value, where)
    if "stringValue" in value:
        return _string(value["stringValue"], where)
    if "boolValue" in value:
        if not isinstance(value["boolValue"], bool):
            raise BadOtlp(f"{where}: boolValue must be true or false")
        return value["boolValue"]
    if "intValue" in value:
        raw = value["intValue"]
        if isinstance(raw, str) and raw.lstrip("-").isdigit():
            return int(raw)
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        raise BadOtlp(f"{where}: intValue must be an integer")
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
        raise BadOtlp(f"{where}: doubleValue must be a number")
    if "arrayValue" in value:
        items = _list(value["arrayValue"], "values", where)
        return [_json_value(v, where, depth + 1) for v in items]
    if "kvlistValue" in value:
        return _json_attributes({"attributes": _list(value["kvlistValue"], "values", where)},
                                where)
    if "bytesValue" in value:
        return _string(value["bytesValue"], where)
    return None


def response(rejected: int, message: str, *, protobuf: bool) -> tuple[bytes, str]:
    """An `ExportTraceServiceResponse` (partialSuccess when spans were refused) and its type."""
    if protobuf:
        answer = ExportTraceServiceResponse()
        if rejected:
            answer.partial_success.rejected_spans = rejected
            answer.partial_success.error_message = message
        return answer.SerializeToString(), PROTOBUF
    body: dict[str, Any] = {}
    if rejected:
        # OTLP's JSON encoding writes 64-bit integers as decimal strings.
        body["partialSuccess"] = {"rejectedSpans": str(rejected), "errorMessage": message}
    return (json.dumps(body) + "\n").encode(), JSON
