"""What the trace ingest view and the single-trace fast path share, so they answer alike.

`router.api.traces` (the Flask view) and `router.api.ingest_fast` (the layer in
front of Flask) both store single traces; the answer text, the bound-config
rule and the environ key by which the fast path hands a request on live here,
once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bindings.errors import OutcomeUnknown, StoreUnavailable
from bindings.models import Binding
from gatekeeper.store.trace_ingest import Checked, Stored
from router.server import logs, metrics

#: Where router.api.traces.init_app keeps the app's TraceStore (beside the core Services).
EXTENSION = "rolegate.traces"
#: WSGI environ key: this request's quota was counted already (True) or refused (a
#: router.server.quota.Refusal, or the QuotaExceeded a batch met) by the fast path, which
#: then handed the request on.
QUOTA_COUNTED = "rolegate.quota_counted"
#: WSGI environ key: part of this request may be in Redis already (a send whose answer
#: never came, on the fast path or the view's; traces stored before a later step failed).
MAY_BE_APPLIED = "rolegate.may_be_applied"


@contextmanager
def honest_outcome(environ: dict[str, Any]) -> Iterator[None]:
    """A 503 means nothing was applied: once something may have been, it is a 504.

    Ingest is idempotent (a stored run_id answers `duplicate`), so the 504's
    retry is safe; a 503 there would tell the sender a stored trace was not.
    """
    try:
        yield
    except StoreUnavailable as exc:
        if not environ.get(MAY_BE_APPLIED):
            raise
        raise OutcomeUnknown(
            f"part of this request may be stored already, then Redis failed: {exc.message}; "
            "send it again (ingest is idempotent: a stored run_id answers duplicate)",
            **exc.details) from exc


def bound(config: str, binding: Binding) -> bool:
    """Whether `config` is one the binding runs: its current or its candidate."""
    return config == binding.current or config == binding.candidate


def stored_result(index: int, item: Checked, outcome: Stored) -> str:
    """The JSON text of one stored trace's result (its verdict as the store encoded it).

    A trace stored under a run id another reporter sent first says `"clash":true`
    (accepted and counted as its reporter's; the other reporters are not named).
    """
    status = "duplicate" if outcome.duplicate else "accepted"
    clash = ',"clash":true' if outcome.clash else ""
    return (f'{{"index":{index},"run_id":{json.dumps(item.trace.run_id)},'
            f'"status":"{status}"{clash},"verdict":{item.verdict.json_text}}}')


def note_clash(item: Checked, outcome: Stored) -> None:
    """Log and count a trace stored under a run id other reporters claimed first.

    Run ids are often predictable; a token reporting under another's ids is how
    someone would try to shadow the runs a gate counts (`store.trace_ingest`).
    """
    trace = item.trace
    metrics.count_clash(trace.role, trace.reporter or "")
    logs.emit("run_id_clash", role=trace.role, run_id=trace.run_id, config=trace.config,
              arm=trace.arm, reporter=trace.reporter, claimed_by=list(outcome.clash))


def single_answer(result: str, duplicates: int) -> str:
    """The 200 answer of a request whose one trace was stored and tripped nothing."""
    return (f'{{"accepted":{1 - duplicates},"duplicates":{duplicates},"refused":0,'
            f'"results":[{result}],"tripwire":[]}}\n')


#: The `Prefer` token asking for the compact answer (RFC 7240), echoed in Preference-Applied.
MINIMAL = "return=minimal"


def wants_minimal(prefer: str | None) -> bool:
    """Whether a `Prefer` header asks for `return=minimal` (among any other preferences)."""
    if not prefer:
        return False
    return any(part.split(";")[0].strip().lower() == MINIMAL
               for part in prefer.split(","))


def compact(results: list[dict[str, Any] | str],
            trips: list[dict[str, Any]]) -> list[dict[str, Any] | str]:
    """The results a compact answer keeps: every refusal, and each trace that tripped the wire.

    A batch's answer then grows with what went wrong, not with its size: a
    stored trace that tripped nothing is only counted in `accepted`/`duplicates`.
    """
    tripped = {f'"run_id":{json.dumps(trip["run_id"])},' for trip in trips}
    return [r for r in results if isinstance(r, dict)
            or (tripped and any(mark in r for mark in tripped))]


def answer_text(results: list[dict[str, Any] | str | None], duplicates: int,
                trips: list[dict[str, Any]], minimal: bool) -> tuple[int, str] | None:
    """The 200 or 207 answer of a stored trace-JSON request: (status, body text).

    None when every trace was refused (the view's 403 or 422). `results` are
    refusals (dicts) and stored outcomes (JSON text); `minimal` (the request said
    `Prefer: return=minimal`): the counts, and results only for the traces refused
    or that tripped the wire (`compact`). The view and the ingest fast path both
    answer with this text.
    """
    if len(results) == 1 and isinstance(results[0], str) and not trips and not minimal:
        # One trace stored (every single-trace POST): its answer without the batch walk.
        return 200, single_answer(results[0], duplicates)
    given = [r for r in results if r is not None]
    refused = sum(isinstance(r, dict) for r in given)
    if refused and refused == len(given):
        return None
    kept = compact(given, trips) if minimal else given
    parts = [r if isinstance(r, str) else json.dumps(r, separators=(",", ":")) for r in kept]
    text = (f'{{"accepted":{len(given) - refused - duplicates},'
            f'"duplicates":{duplicates},"refused":{refused},'
            f'"results":[{",".join(parts)}],"tripwire":{json.dumps(trips)}}}\n')
    return 207 if refused else 200, text
