"""docs/bucketing-vectors.json against rolegate.routing: the published spec is the code."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from bindings.models import Binding
from rolegate.routing import bucket, resolve

VECTORS = json.loads((Path(__file__).resolve().parent.parent / "docs" /
                      "bucketing-vectors.json").read_text())


def spec_bucket(role: str, key: str) -> tuple[bytes, int, float]:
    """docs/bucketing.md section 1, step by step: digest, h, bucket."""
    digest = hashlib.blake2b(role.encode() + b"\x00" + key.encode(), digest_size=8,
                             person=b"rolegate").digest()
    h = int.from_bytes(digest, "big")
    return digest, h, float(h) / 2.0**64


@pytest.mark.parametrize("vector", VECTORS["buckets"],
                         ids=lambda v: f"{v['role']}|{v['key']}"[:40])
def test_each_bucket_vector_is_what_routing_computes(vector: dict[str, Any]) -> None:
    """Digest, h and bucket of each vector: the spec's steps and rolegate.routing.bucket agree."""
    digest, h, value = spec_bucket(vector["role"], vector["key"])
    assert digest.hex() == vector["digest"] and str(h) == vector["uint64"]
    assert value == vector["bucket"] == bucket(vector["role"], vector["key"])


@pytest.mark.parametrize("case", VECTORS["resolutions"],
                         ids=lambda c: f"{c['binding'].get('stage', 'stable')}-{c['key']}")
def test_each_resolution_vector_is_what_resolve_answers(case: dict[str, Any]) -> None:
    """Arm, config, shadow and rule of each vector are rolegate.routing.resolve's answer."""
    answer = resolve("summarizer", Binding.model_validate(case["binding"]), 1, case["key"],
                     attributes=case.get("attributes"))
    got = {"arm": answer["arm"], "config": answer["config"], "shadow": answer["shadow"]}
    if "rule" in answer:
        got["rule"] = answer["rule"]
    assert got == case["expect"]
    assert bucket("summarizer", case["key"]) == case["bucket"]


def test_the_vectors_cover_what_the_spec_names() -> None:
    """Edge cases the page promises are in the file: empty parts, the NUL pair, non-ASCII, 500."""
    pairs = {(v["role"], v["key"]) for v in VECTORS["buckets"]}
    assert {("summarizer", ""), ("", "job-1"), ("a", "bc"), ("ab", "c")} <= pairs
    assert any(len(key) == 500 for _, key in pairs)
    assert any(any(ord(ch) > 0xFFFF for ch in key) for _, key in pairs)
    stages = {c["binding"].get("stage", "stable") for c in VECTORS["resolutions"]}
    assert stages == {"stable", "shadow", "canary", "full", "rolled_back"}
    edge = [c for c in VECTORS["resolutions"] if c["binding"].get("share") == c["bucket"]]
    assert edge and all(c["expect"]["arm"] == "current" for c in edge)
    arms_by_rule = {c["expect"]["arm"] for c in VECTORS["resolutions"] if "rule" in c["expect"]}
    assert arms_by_rule == {"current", "candidate"}
