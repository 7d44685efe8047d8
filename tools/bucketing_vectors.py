"""Regenerate docs/bucketing-vectors.json, the published bucketing vectors, from rolegate.routing.

    python -m tools.bucketing_vectors            # write docs/bucketing-vectors.json
    python -m tools.bucketing_vectors --check    # exit 1 if the file is not this output

Every bucketing version, unsalted and salted, by key and by an attribute
(docs/bucketing.md). tests/test_bucketing_vectors.py checks the file equals
`render()` and holds each vector against the spec's steps, computed its own way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bindings.models import Binding
from rolegate.routing import BUCKET_SPACE, BUCKET_VERSIONS, resolve, unit_of

PATH = Path(__file__).resolve().parent.parent / "docs" / "bucketing-vectors.json"
ABOUT = ("rolegate bucketing test vectors (docs/bucketing.md), written by "
         "`python -m tools.bucketing_vectors`; tests/test_bucketing_vectors.py holds them "
         "against rolegate.routing")
#: (role, key) pairs: the edge cases docs/bucketing.md promises, in every version.
PAIRS: tuple[tuple[str, str], ...] = (
    *(("summarizer", f"job-{n}") for n in range(12)),
    ("summarizer", ""), ("", "job-1"), ("a", "bc"), ("ab", "c"),
    ("labeler", "ticket-88213"), ("summarizer", "ключ-7"), ("réviseur", "job-1"),
    ("summarizer", "工作-42"), ("summarizer", "emoji-😀"), ("summarizer", "0123456789abcdef"),
    ("summarizer", "k" * 500), ("x.y-z_1", "user:42@example.com"),
)
#: Salts: none, a drawn one (16 hex digits, the longest), and a short one an operator named.
SALTS: tuple[str | None, ...] = (None, "9f86d081884c7d65", "q3")
#: Keys the salted and attribute vectors use (a few suffice: the pairs cover the edges).
SALTED_PAIRS = PAIRS[:4] + (("summarizer", ""), ("ab", "c"), ("summarizer", "emoji-😀"))

CANARY: dict[str, Any] = {"current": "sum-v1", "candidate": "sum-v2", "stage": "canary",
                          "share": 0.25}
RULES: list[dict[str, Any]] = [
    {"when": {"tenant": ["internal", "staff"]}, "arm": "candidate", "name": "staff"},
    {"when": {"tenant": ["acme"], "plan": ["free"]}, "arm": "current"},
]


def _digest(role: str, key: str, salt: str | None, version: int) -> tuple[str, int]:
    """The 8 digest bytes (hex) and h, computed here from the spec, not by rolegate.routing."""
    import hashlib

    import xxhash

    if version == 1:
        raw = hashlib.blake2b(f"{role}\x00{key}".encode(), digest_size=8, person=b"rolegate",
                              salt=(salt or "").encode()).digest()
    else:
        raw = xxhash.xxh3_64(f"{role}\x00{salt or ''}\x00{key}".encode()).digest()
    return raw.hex(), int.from_bytes(raw, "big")


def bucket_vectors() -> list[dict[str, Any]]:
    """{role, key, version, salt, digest, uint64, bucket} for every version and salt."""
    out = []
    for version in BUCKET_VERSIONS:
        for salt in SALTS:
            for role, key in PAIRS if salt is None else SALTED_PAIRS:
                digest, h = _digest(role, key, salt, version)
                out.append({"role": role, "key": key, "version": version, "salt": salt,
                            "digest": digest, "uint64": str(h), "bucket": h / BUCKET_SPACE})
    return out


def _cases() -> list[tuple[dict[str, Any], str, dict[str, str] | None]]:
    """(binding, key, attributes) of each resolution vector."""
    cases: list[tuple[dict[str, Any], str, dict[str, str] | None]] = []
    cases += [(CANARY, f"job-{n}", None) for n in range(8)]
    # A share exactly equal to a key's bucket: that key stays on current.
    edge = {**CANARY, "share": 0.9605007792346469}
    cases += [(edge, "job-3", None), (edge, "job-1", None)]
    pair = {"current": "sum-v1", "candidate": "sum-v2"}
    cases += [({"current": "sum-v1"}, "job-1", None),
              ({**pair, "stage": "shadow"}, "job-1", None),
              ({**CANARY, "stage": "full", "share": 1.0}, "job-1", None),
              ({**pair, "stage": "rolled_back"}, "job-1", None)]
    ruled = {**CANARY, "rules": RULES}
    cases += [(ruled, "job-1", {"tenant": "staff"}),
              (ruled, "job-4", {"tenant": "acme", "plan": "free"}),
              (ruled, "job-4", {"tenant": "acme", "plan": "pro"}),
              (ruled, "job-0", {"region": "eu"}),
              ({**ruled, "stage": "full", "share": 1.0}, "job-2", {"tenant": "acme", "plan": "free"}),
              ({**pair, "stage": "shadow", "rules": RULES}, "job-1", {"tenant": "staff"})]
    # Versions and salts: a canary split under each.
    for version in BUCKET_VERSIONS:
        for salt in SALTS[1:] if version == 1 else SALTS:
            binding = {**CANARY, "share": 0.5, "bucket_version": version, "salt": salt}
            cases += [(binding, f"job-{n}", None) for n in range(6)]
    # By an attribute: every job of one tenant gets the tenant's arm, whatever its key;
    # a job without the attribute is served current (unit_missing); rules still come first.
    by_tenant = {**CANARY, "share": 0.5, "bucket_by": "tenant", "bucket_version": 2,
                 "salt": "9f86d081884c7d65"}
    for tenant in ("acme", "globex", "initech", "umbrella"):
        cases += [(by_tenant, key, {"tenant": tenant}) for key in ("job-1", "job-2")]
    cases += [(by_tenant, "job-1", None), (by_tenant, "job-1", {"region": "eu"}),
              ({**by_tenant, "rules": RULES}, "job-1", {"tenant": "staff"}),
              ({**by_tenant, "stage": "full", "share": 1.0}, "job-1", {"tenant": "acme"}),
              ({**by_tenant, "stage": "full", "share": 1.0}, "job-1", None),
              ({**by_tenant, "bucket_version": 1, "salt": None}, "job-1", {"tenant": "acme"})]
    return cases


def resolution_vectors() -> list[dict[str, Any]]:
    """{binding, key, attributes?, unit, bucket, expect} for role summarizer."""
    out = []
    for raw, key, attributes in _cases():
        binding = {k: v for k, v in raw.items() if not (k == "salt" and v is None)}
        model = Binding.model_validate(binding)
        answer = resolve("summarizer", model, 1, key, attributes=attributes)
        unit = unit_of(model, key, attributes)
        case: dict[str, Any] = {"binding": binding, "key": key}
        if attributes is not None:
            case["attributes"] = attributes
        expect: dict[str, Any] = {"arm": answer["arm"], "config": answer["config"],
                                  "shadow": answer["shadow"], "bucketing": answer["bucketing"]}
        for optional in ("rule", "attributes"):
            if optional in answer:
                expect[optional] = answer[optional]  # type: ignore[literal-required]
        case["unit"] = unit
        case["bucket"] = (None if unit is None else
                          _digest("summarizer", unit, model.salt, model.bucket_version)[1]
                          / BUCKET_SPACE)
        case["expect"] = expect
        out.append(case)
    return out


def render() -> str:
    """The vector file's text."""
    body = {"about": ABOUT, "version": 2, "buckets": bucket_vectors(),
            "resolutions": resolution_vectors()}
    return json.dumps(body, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write the file, or with --check say whether it is current."""
    text = render()
    if "--check" in argv:
        if PATH.read_text() != text:
            print(f"{PATH} is not what `python -m tools.bucketing_vectors` writes", file=sys.stderr)
            return 1
        return 0
    PATH.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
