"""`bucket(role, key, ...) < share` inlined for the client's hot path (issue 38).

Not another bucketing function: for a version-2 role bucketed by key,
`rolegate.routing.bucket` is XXH3-64 of (role NUL salt NUL key) divided by 2**64.
`Client.resolve` computes the 64-bit hash itself from the role's message head
and compares it with an integer cut, skipping a closure call and the float
division. `cut(share)` is the least 64-bit value whose bucket is not below
`share`, found by bisection over the very expression `bucket` evaluates, so
`hash < cut` holds exactly when `bucket < share`, rounding included.

`inline_split` checks itself against `rolegate.routing.bucket` on probe keys and
returns None when they differ, or for a version it does not inline (1): the
caller then calls the role's `bucketer`, slower but never wrong.
"""

from __future__ import annotations

from collections.abc import Callable

from xxhash import xxh3_64_intdigest

from rolegate.routing import BUCKET_SPACE, bucket

#: One past the largest 64-bit hash.
HASH_SPACE = 1 << 64
_PROBES = tuple(f"split-probe-{n}" for n in range(8)) + ("", "é", "\U0001f600")


def cut(share: float) -> int:
    """The least 64-bit hash whose bucket (hash / 2**64, as `bucket` divides) is not below `share`."""
    low, high = 0, HASH_SPACE  # the answer lies in [low, high]
    while low < high:
        middle = (low + high) // 2
        if middle / BUCKET_SPACE >= share:
            high = middle
        else:
            low = middle + 1
    return low


def inline_split(role: str, salt: str | None, version: int, share: float,
                 bucket_of: Callable[[str], float] | None = None) -> tuple[str, int] | None:
    """(message head, cut) for a role bucketed by key under version 2; None otherwise.

    A key goes to the candidate iff `xxh3_64_intdigest((head + key).encode()) < cut`.
    The head is the role's `bucketer` closure's own string when it holds an equal one
    (`bucket_of`), so a client of many roles keeps one copy of each.
    """
    if version != 2:
        return None
    head = f"{role}\x00{salt or ''}\x00"
    for cell in getattr(bucket_of, "__closure__", None) or ():
        if cell.cell_contents == head:
            head = cell.cell_contents
    limit = cut(share)
    for key in (*_PROBES, role):
        hashed = xxh3_64_intdigest((head + key).encode())
        expected = bucket(role, key, salt=salt, version=version)
        if hashed / BUCKET_SPACE != expected or (hashed < limit) != (expected < share):
            return None
    return head, limit
