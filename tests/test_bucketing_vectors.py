"""docs/bucketing-vectors.json against rolegate.routing: the published spec is the code.

The file is what `python -m tools.bucketing_vectors` writes (checked here), and each
vector is held against the spec's steps (docs/bucketing.md), computed here a third
way, and against `rolegate.routing`.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import xxhash

from bindings.models import Binding
from rolegate.routing import bucket, resolve
from tools import bucketing_vectors

ROOT = Path(__file__).resolve().parent.parent
VECTORS = json.loads((ROOT / "docs" / "bucketing-vectors.json").read_text())


def spec_bucket(role: str, key: str, salt: str | None, version: int) -> tuple[bytes, int, float]:
    """docs/bucketing.md section 1, step by step: digest, h, bucket."""
    if version == 1:
        salt_field = (salt or "").encode().ljust(16, b"\x00")  # BLAKE2b's 16-byte salt field
        digest = hashlib.blake2b(role.encode() + b"\x00" + key.encode(), digest_size=8,
                                 person=b"rolegate", salt=salt_field).digest()
    else:
        message = role.encode() + b"\x00" + (salt or "").encode() + b"\x00" + key.encode()
        digest = xxhash.xxh3_64_intdigest(message).to_bytes(8, "big")
    h = int.from_bytes(digest, "big")
    return digest, h, float(h) / 2.0**64


def test_the_file_is_what_the_script_writes() -> None:
    """Regenerated, not edited: `python -m tools.bucketing_vectors --check` passes."""
    assert (ROOT / "docs" / "bucketing-vectors.json").read_text() == bucketing_vectors.render()
    check = subprocess.run([sys.executable, "-m", "tools.bucketing_vectors", "--check"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("vector", VECTORS["buckets"],
                         ids=lambda v: f"v{v['version']}-{v['salt']}-{v['role']}|{v['key']}"[:48])
def test_each_bucket_vector_is_what_routing_computes(vector: dict[str, Any]) -> None:
    """Digest, h and bucket of each vector: the spec's steps and rolegate.routing.bucket agree."""
    digest, h, value = spec_bucket(vector["role"], vector["key"], vector["salt"],
                                   vector["version"])
    assert digest.hex() == vector["digest"] and str(h) == vector["uint64"]
    assert value == vector["bucket"] == bucket(vector["role"], vector["key"],
                                               salt=vector["salt"], version=vector["version"])


@pytest.mark.parametrize("case", VECTORS["resolutions"],
                         ids=lambda c: f"{c['binding'].get('stage', 'stable')}-{c['key']}")
def test_each_resolution_vector_is_what_resolve_answers(case: dict[str, Any]) -> None:
    """Arm, config, shadow, rule, attributes and bucketing of each vector: resolve's answer."""
    binding = Binding.model_validate(case["binding"])
    answer = resolve("summarizer", binding, 1, case["key"], attributes=case.get("attributes"))
    got = {"arm": answer["arm"], "config": answer["config"], "shadow": answer["shadow"],
           "bucketing": answer["bucketing"]}
    for optional in ("rule", "attributes"):
        if optional in answer:
            got[optional] = answer[optional]  # type: ignore[literal-required]
    assert got == case["expect"]
    if case["unit"] is None:
        assert case["bucket"] is None and answer["bucketing"].get("unit_missing") is True
    else:
        assert spec_bucket("summarizer", case["unit"], binding.salt,
                           binding.bucket_version)[2] == case["bucket"]


def test_the_vectors_cover_what_the_spec_names() -> None:
    """Edge cases the page promises, in every version and salting, by key and by attribute."""
    buckets = VECTORS["buckets"]
    assert {(v["version"], v["salt"] is not None) for v in buckets} == {
        (1, False), (1, True), (2, False), (2, True)}
    for version in (1, 2):
        pairs = {(v["role"], v["key"]) for v in buckets
                 if v["version"] == version and v["salt"] is None}
        assert {("summarizer", ""), ("", "job-1"), ("a", "bc"), ("ab", "c")} <= pairs
        assert any(len(key) == 500 for _, key in pairs)
        assert any(any(ord(ch) > 0xFFFF for ch in key) for _, key in pairs)
    cases = VECTORS["resolutions"]
    stages = {c["binding"].get("stage", "stable") for c in cases}
    assert stages == {"stable", "shadow", "canary", "full", "rolled_back"}
    edge = [c for c in cases if c["binding"].get("share") == c["bucket"]]
    assert edge and all(c["expect"]["arm"] == "current" for c in edge)
    assert {c["expect"]["arm"] for c in cases if "rule" in c["expect"]} == {"current", "candidate"}
    seen = {(c["expect"]["bucketing"]["version"], c["expect"]["bucketing"]["salted"],
             c["expect"]["arm"]) for c in cases if c["binding"].get("stage") == "canary"}
    assert {(v, s, arm) for v in (1, 2) for s in (False, True)
            for arm in ("current", "candidate")} <= seen
    by_tenant = [c for c in cases if c["binding"].get("bucket_by") == "tenant"
                 and "rule" not in c["expect"]]
    arms: dict[str, set[str]] = {}
    for c in by_tenant:
        if c["unit"] is not None and c["binding"]["stage"] == "canary":
            unit = json.dumps([c["binding"], c["unit"]], sort_keys=True)
            arms.setdefault(unit, set()).add(c["expect"]["arm"])
    # One arm per tenant (under one binding), whatever the key; both arms among them.
    assert all(len(a) == 1 for a in arms.values()) and set().union(*arms.values()) == {
        "current", "candidate"}
    missing = [c for c in by_tenant if c["unit"] is None]
    assert missing and all(c["expect"]["arm"] == "current"
                           and c["expect"]["bucketing"]["unit_missing"] for c in missing)
