"""What became of the traces handed to a client's `report()`: the counters it keeps.

Every trace ends up counted in exactly one of `sent`, `dropped`, `rejected` or
`unsent` (see rolegate/reporter.py, which keeps them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReportStats:
    """What became of the traces handed to `report()`."""

    #: Waiting in the queue or in the batch being sent.
    queued: int
    #: Accepted by the router (a duplicate run_id counts: the router has it).
    sent: int
    #: Pushed out of a full queue before they could be sent.
    dropped: int
    #: Of `sent`, the retries of a run the router already had (stored once).
    duplicates: int
    #: Refused by the router; each reason logged, counted by code in `rejections`.
    rejected: int
    #: Still unsent when close() gave up, or lost to a sender error (logged).
    unsent: int
    #: Sending attempts that failed and were retried later.
    failed_attempts: int
    #: Traces holding a value JSON cannot encode, sent with it as its repr().
    coerced: int = 0
    #: Unexpected errors the sending loop caught, logged and survived.
    sender_errors: int = 0
    #: 413 answers that made a batch split.
    splits: int = 0
    #: Rejected traces by the router's error code (e.g. {"invalid": 2}).
    rejections: Mapping[str, int] = field(default_factory=dict)
