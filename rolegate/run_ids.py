"""Run ids born at assignment: each resolve names the run it starts.

Every resolve path (the SDK's in-process `Client.resolve`, the router's HTTP
resolve and its fast path, OFREP single and bulk) answers a `run_id`, and counts
the assignment under it (`rolegate.exposures`). A run whose trace carries that
id as its `run_id` is matched to its own assignment when the report lands
(`gatekeeper.store.run_matches`), so "missing" means this run's report never
came, not that one report bucket came up short of another.

An id is ``r1.<stem>.<n>``: the stem is 12 random hex digits drawn per
`rolegate.exposures.Exposures` (one per client and per router worker, drawn
anew after a fork), `n` the value of the (role, config, arm, epoch) counter
that counted the assignment, each counter numbering from a block of its own:
no lock, no clock, no randomness per call (the resolve is the hot path). The
SDK's in-process answer carries the id as its two parts, `run_stem` and
`run_seq` (the counter's value, which counting the exposure draws anyway),
joined by `run_id_of` and the recorder: building the string per resolve cost
about 0.2 us, 40% of the resolve (bench.peers), and a stem held in each
precompiled answer grew the SDK's snapshot by a quarter. Ids are sent to the
router as ranges ``(stem, from, to)``, never one by one. A forked child draws a
new stem (its `Exposures` is made anew), so parent and child never mint the same
id.
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Iterator, Mapping
from typing import Any

#: What every minted id starts with (the version of this shape).
PREFIX = "r1."
#: A minted id, whole: what the ingest script and the exposure rows accept as one.
MINTED = re.compile(r"r1\.[0-9a-f]{12,32}\.[0-9]{1,19}")
#: A stem as an exposure row names it (`r1.<hex>.`).
STEM = re.compile(r"r1\.[0-9a-f]{12,32}\.")


def new_stem() -> str:
    """A fresh stem: ``r1.<12 random hex digits>.``."""
    return f"{PREFIX}{secrets.token_hex(6)}."


def minter(stem: str, counter: itertools.count[int]) -> Iterator[str]:
    """The ids ``stem + str(n)`` for `counter`'s values, one per `next()` (advancing it)."""
    return map(stem.__add__, map(str, counter))


def run_id_of(resolution: Mapping[str, Any]) -> str | None:
    """The run id a resolve answered: `run_id` (HTTP, OFREP), or the SDK's `run_stem` and
    `run_seq` joined (None: an answer from before run ids)."""
    run_id = resolution.get("run_id")
    if isinstance(run_id, str) and run_id:
        return run_id
    stem, seq = resolution.get("run_stem"), resolution.get("run_seq")
    if isinstance(stem, str) and isinstance(seq, int):
        return f"{stem}{seq}"
    return None


def is_minted(run_id: str) -> bool:
    """True when `run_id` has the shape of an id minted at assignment."""
    return run_id.startswith(PREFIX) and MINTED.fullmatch(run_id) is not None


def with_run_slots(fast: tuple[Any, ...], stem: str) -> tuple[Any, ...]:
    """A snapshot entry (`rolegate.snapshot.Fast`) as `Client.resolve` reads it once the role
    is resolved: its answers hold the run id's slots, `run_stem` filled and `run_seq` for
    the counter's value, and a tenth element says so.

    Setting a key a copied answer already has never grows it, where adding two grew
    each resolve's copy (0.1 us of 0.5); held from the start, the slots grew every
    role's answers by a third, resolved or not (`tests/test_client_view.py`'s 2 KB).
    """
    first, second = fast[0], fast[1]
    first = {**first, "run_stem": stem, "run_seq": 0}
    if second is not None:
        second = {**second, "run_stem": stem, "run_seq": 0}
    return (first, second, *fast[2:9], True)
