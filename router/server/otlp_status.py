"""The error body OTLP/HTTP asks for: a protobuf `google.rpc.Status` for protobuf exports.

OTLP/HTTP says a 4xx or 5xx answer to a protobuf export carries a
protobuf-encoded `google.rpc.Status` (the gRPC status code and a message), and
OpenTelemetry exporters log it. `router.server.errors` renders every refusal
of a `POST /v1/traces` whose body is `application/x-protobuf` this way; JSON
requests keep rolegate's JSON error shape. The message has two fields, so it is
encoded here rather than pulling in googleapis-common-protos for it.
"""

from __future__ import annotations

#: The request Content-Type whose errors are answered this way.
PROTOBUF = "application/x-protobuf"

#: HTTP status -> gRPC status code (google.rpc.Code), as OTLP's HTTP mapping pairs them.
GRPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 405: 12, 408: 4, 409: 10, 413: 8, 415: 3,
              422: 3, 429: 8, 500: 13, 501: 12, 502: 14, 503: 14, 504: 4}
UNKNOWN = 2


def wants_status(path: str, mimetype: str) -> bool:
    """Whether a refusal of this request is answered with a protobuf Status."""
    return path == "/v1/traces" and mimetype == PROTOBUF


def encode_status(http_status: int, message: str) -> bytes:
    """A serialized `google.rpc.Status{code, message}` for an HTTP error answer."""
    code = GRPC_CODES.get(http_status, UNKNOWN)
    text = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)
