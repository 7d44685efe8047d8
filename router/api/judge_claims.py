"""Which judged results the router accepts: answers to claims it still holds, for real runs.

`POST /v1/roles/<role>/judge/verdicts` records nothing until every result of the
request passes (`check_claims`): its `claim` is held (handed out by
`/judge/claim`, not answered yet, not past its deadline and sent back to the
queue), it names the run, reporter, arm, config and epoch that claim was handed
out for (and a pair's two runs), and the run is stored. Otherwise the whole
request is refused, each refused result named in `details.refused` with its
`why` (`not_claimed`, `claim_mismatch`, `run_not_found`): 404 when every one is
a run that is not stored, else 409. Nothing is written either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from bindings.errors import Conflict, NotFound
from router.api.judge_sampling import judge_store
from router.api.traces import trace_store

#: The fields a result must carry as its claim was handed out with them.
_SAME = ("run_id", "reporter", "arm", "config", "epoch")


class Answer(Protocol):
    """What `check_claims` reads of one result (`router.api.judges.Result`)."""

    @property
    def claim(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def reporter(self) -> str | None: ...
    @property
    def arm(self) -> str: ...
    @property
    def config(self) -> str: ...
    @property
    def epoch(self) -> str: ...
    @property
    def error(self) -> str | None: ...

    @property
    def pair_runs(self) -> dict[str, tuple[str, str | None]] | None:
        """arm -> (run id, reporter) of a pairwise result; None for a criteria result."""


def check_claims(role: str, results: Sequence[Answer]) -> None:
    """Raise (409, or 404 when only stored runs are missing) naming every result that does
    not answer a held claim for its own run; return when all do."""
    held = judge_store().held(role, sorted({r.claim for r in results}))
    refused: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, result in enumerate(results):
        why = _claimed(result, held.get(result.claim), seen) or _stored(role, result)
        seen.add(result.claim)
        if why is not None:
            refused.append({"index": index, "run_id": result.run_id, "claim": result.claim,
                            "why": why[0], "message": why[1]})
    if not refused:
        return
    message = (f"{len(refused)} of {len(results)} results refused, nothing recorded: "
               f"results[{refused[0]['index']}]: {refused[0]['message']}")
    if all(r["why"] == "run_not_found" for r in refused):
        raise NotFound(message, refused=refused)
    raise Conflict(message, refused=refused)


def _claimed(result: Answer, item: Mapping[str, Any] | None,
             seen: set[str]) -> tuple[str, str] | None:
    """Why `result` does not answer its claim (`item` as handed out), or None."""
    if result.claim in seen:
        return "not_claimed", f"claim {result.claim!r} is answered twice in this request"
    if item is None:
        return "not_claimed", (f"claim {result.claim!r} is not held: never handed out, already "
                               "answered, or past its deadline and back in the queue")
    for name in _SAME:
        given, handed = getattr(result, name), item.get(name)
        if (given or None) != (handed or None):
            return "claim_mismatch", (f"claim {result.claim!r} was handed out for {name} "
                                      f"{handed!r}, not {given!r}")
    pair = item.get("pair")
    runs = result.pair_runs
    if pair is None and runs is not None:
        return "claim_mismatch", f"claim {result.claim!r} is one run's, not a pair's"
    if pair is not None and result.error is None:
        handed_runs = {arm: (run["run_id"], run.get("reporter") or None)
                       for arm, run in pair.items()}
        if runs is None or {a: (r, p or None) for a, (r, p) in runs.items()} != handed_runs:
            return "claim_mismatch", (f"claim {result.claim!r} was handed out for the pair "
                                      f"{handed_runs}, not {runs}")
    return None


def _stored(role: str, result: Answer) -> tuple[str, str] | None:
    """Why the run(s) `result` judges cannot be found, or None."""
    runs = result.pair_runs or {"": (result.run_id, result.reporter)}
    for run_id, reporter in runs.values():
        try:
            trace_store().lookup(role, run_id, reporter)
        except NotFound:
            return "run_not_found", (f"run {run_id!r} (reporter {reporter!r}) of role "
                                     f"{role!r} is not stored")
    return None
