"""OFREP's evaluations, shared by the Flask views (`router.api.ofrep`) and the fast path.

Resolving a context for one role or for every role a token may act on,
counting what was assigned, and the bulk answer's bytes and ETag: one code
path, so an evaluation answered in front of Flask (`router.api.ofrep_fast`) is
the one the views would give.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask

from bindings.models import VersionedBinding
from rolegate.routing import Resolution, resolve
from router.api.exposures import count_resolution
from router.api.ofrep_shapes import etag, evaluation, job_attributes

#: One encoder for every answer: json.dumps with separators builds a new one per call.
_encode = json.JSONEncoder(separators=(",", ":")).encode


def evaluate_one(app: Flask, role: str, record: VersionedBinding, key: str,
                 context: Mapping[str, Any], stale: bool, reporter: str) -> Resolution:
    """Resolve `role` for the context, counted as an exposure like GET /v1/resolve (under
    `reporter`, the evaluating token's name)."""
    resolution = resolve(role, record.binding, record.version, key, stale=stale,
                         attributes=job_attributes(context, record.binding.rules,
                                                   record.binding.bucket_by))
    # An assignment like GET /v1/resolve's: counted, so runs that never report show.
    count_resolution(app, role, resolution, record.binding, reporter)
    return resolution


def evaluate_all(records: Mapping[str, VersionedBinding], key: str,
                 context: Mapping[str, Any], stale: bool,
                 may: Callable[[str], bool]) -> list[Resolution]:
    """Resolve every role `may` allows, by name; not counted yet (a 304 assigns nothing)."""
    return [resolve(role, record.binding, record.version, key, stale=stale,
                    attributes=job_attributes(context, record.binding.rules,
                                              record.binding.bucket_by))
            for role, record in sorted(records.items()) if may(role)]


def count_all(app: Flask, resolutions: list[Resolution],
              records: Mapping[str, VersionedBinding], reporter: str) -> None:
    """Count a bulk answer's evaluations, each role once (when the answer is a 200), under
    `reporter`, the evaluating token's name."""
    for resolution in resolutions:
        count_resolution(app, resolution["role"], resolution,
                         records[resolution["role"]].binding, reporter)


def bulk_payload(resolutions: list[Resolution],
                 bodies: Mapping[str, Any] | None = None) -> tuple[bytes, str]:
    """The bulk answer's JSON bytes and its ETag (built before the evaluations are counted,
    so the tag never covers their run ids: the same evaluations give the same tag).

    The tag covers the answer itself, so it changes exactly when a role, a
    stage, a share or a rule moves this context's evaluations.
    """
    payload = _encode({"flags": [evaluation(r, bodies) for r in resolutions]}).encode()
    return payload, etag(payload)


def single_payload(resolution: Resolution, bodies: Mapping[str, Any] | None = None) -> bytes:
    """A single evaluation's JSON bytes."""
    return _encode(evaluation(resolution, bodies)).encode()
