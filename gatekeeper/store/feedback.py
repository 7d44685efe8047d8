"""Reviewers' feedback on production runs, in Redis beside the role's traces.

Keys (the role is the Redis Cluster hash tag, as for the traces)::

    rolegate:{role}:feedback:{run_id}   list: Feedback JSON, oldest first
    rolegate:{role}:feedback            sorted set: run_id scored by its latest feedback time

Feedback is appended, never overwritten: two reviewers disagreeing is a fact the
golden set must see (it flags the case), not a race one of them wins.
"""

from __future__ import annotations

from collections.abc import Iterable

from bindings.connection import Connection
from bindings.errors import Conflict, NotFound
from bindings.store import _redis_errors, load_stored
from gatekeeper.checks.golden import Feedback
from gatekeeper.store.trace_keys import claims_key, legacy_run_key

FEEDBACK_KEY_TEMPLATE = "rolegate:{{{role}}}:feedback:{run_id}"
FEEDBACK_INDEX_TEMPLATE = "rolegate:{{{role}}}:feedback"


def feedback_key(role: str, run_id: str) -> str:
    """The list of feedback entries on one run."""
    return FEEDBACK_KEY_TEMPLATE.format(role=role, run_id=run_id)


def feedback_index_key(role: str) -> str:
    """The role's runs that have feedback, scored by latest feedback time."""
    return FEEDBACK_INDEX_TEMPLATE.format(role=role)


class FeedbackStore:
    """Appends and reads feedback entries per run."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def add(self, role: str, feedback: Feedback) -> list[Feedback]:
        """Append one entry; return every entry on that run, oldest first."""
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=True)
            pipe.rpush(feedback_key(role, feedback.run_id), feedback.model_dump_json())
            pipe.zadd(feedback_index_key(role), {feedback.run_id: feedback.time})
            pipe.lrange(feedback_key(role, feedback.run_id), 0, -1)
            raws = pipe.execute()[-1]
        return [_load(role, raw) for raw in raws]

    def get(self, role: str, run_id: str) -> list[Feedback]:
        """Every entry on one run, oldest first (empty when there is none)."""
        return self.many(role, [run_id]).get(run_id, [])

    def many(self, role: str, run_ids: Iterable[str]) -> dict[str, list[Feedback]]:
        """Entries for each of `run_ids` that has any, in one round trip."""
        ids = list(dict.fromkeys(run_ids))
        if not ids:
            return {}
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for run_id in ids:
                pipe.lrange(feedback_key(role, run_id), 0, -1)
            answers = pipe.execute()
        return {run_id: [_load(role, raw) for raw in raws]
                for run_id, raws in zip(ids, answers) if raws}

    def find_role(self, run_id: str, roles: Iterable[str]) -> str:
        """The one role among `roles` that holds a trace with `run_id`.

        Run ids are unique per role; a run id known to two roles is a Conflict
        (the caller must name the role), one known to none is NotFound.
        """
        candidates = list(roles)
        with _redis_errors():
            pipe = self.connection.pipeline(transaction=False)
            for role in candidates:
                pipe.exists(claims_key(role, run_id), legacy_run_key(role, run_id))
            found = [role for role, hit in zip(candidates, pipe.execute()) if hit]
        if not found:
            raise NotFound(f"no trace with run_id {run_id!r}", run_id=run_id)
        if len(found) > 1:
            raise Conflict(f"run_id {run_id!r} is known to roles {found}; name the role",
                           run_id=run_id, roles=found)
        return found[0]


def _load(role: str, raw: bytes | str) -> Feedback:
    return load_stored(Feedback, raw, f"a stored feedback entry of role {role!r}", role=role)
