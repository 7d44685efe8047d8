"""The gatekeeper process: thin I/O around decide(), over the HTTP API only.

`tick(api, now)` does one pass: for every role, read the gate view, decide, and
(unless dry-run) apply the move with `If-Match` set to the version the decision
was made on, so a stale leader's write, or a move racing a human's, is refused
with 409 and dropped; a role whose gate view (or move) answers an error is held
for that tick while the others are judged. Stage ages are judged on the `time`
the gate view carries (the router's Redis TIME, `bindings.clock`), not `now`. `Gatekeeper.run()` loops: acquire or renew
the lease, tick if leader, sleep; SIGTERM lets the current tick finish, then
releases the lease.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError

from bindings.models import VersionedBinding
from gatekeeper.judging import Judges, judge_tick
from gatekeeper.machine.decide import Action, Decision, decide, evidence_from_view
from gatekeeper.machine.details import DecisionDetails
from gatekeeper.view_model import GateView
from gatekeeper.webhooks import (
    ALARM,
    APPROVAL_NEEDED,
    HOLD_EVENT,
    REFUSED,
    ROLLBACK,
    STAGE_CHANGE,
    WARNING,
    Notifier,
)
from rolegate.http import ApiClient, ApiError

log = logging.getLogger("rolegate.gatekeeper")

#: The router's tripwire writes as this actor; its rollbacks are relayed as webhook events.
TRIPWIRE_ACTOR = "tripwire"
#: Only tripwire rollbacks younger than this are relayed (not old ones after a restart).
TRIPWIRE_RELAY_S = 600.0

#: HTTP statuses that mean "the world moved under this decision": drop it, re-read next tick.
REFUSALS = (404, 409, 412, 428)


#: Set in a decision's details when the role's gate view failed: it was not judged.
UNJUDGED = "unjudged"


def unjudged(decisions: list[Decision]) -> list[str]:
    """The roles of `decisions` that could not be judged (their gate view failed)."""
    return [d.role for d in decisions if d.details.unjudged]


#: Batches of sampled runs judged per role before each tick (`gatekeeper.judging`).
JUDGE_ROUNDS = 10


def _path(role: str) -> str:
    return quote(role, safe="")


def tick(api: ApiClient, now: float, *, dry_run: bool = False,
         notifier: Notifier | None = None, alerted: set[str] | None = None) -> list[Decision]:
    """One pass over every role: decide each, apply the moves, report every decision."""
    listing = api.get("/v1/bindings?view=full")
    decisions: list[Decision] = []
    for role, raw in sorted(listing.get("roles", {}).items()):
        record = VersionedBinding.model_validate(raw)
        try:
            view = GateView.model_validate(api.get(f"/v1/roles/{_path(role)}/gate"))
        except ValidationError as exc:
            # A view this gatekeeper cannot read (a router of another shape): hold, say why.
            log.error("gate view of %s unreadable, holding it this tick: %s", role, exc)
            decisions.append(Decision(role, Action.HOLD, record.version,
                                      record.binding.stage.value,
                                      f"gate view unreadable: {exc.error_count()} fields",
                                      DecisionDetails(unjudged=True)))
            continue
        except ApiError as exc:
            # One role whose gate view fails (a corrupt record, a bug in a section)
            # must not stall every other role's promotions and rollbacks.
            log.error("gate view of %s failed, holding it this tick: %s", role, exc)
            decisions.append(Decision(role, Action.HOLD, record.version,
                                      record.binding.stage.value,
                                      f"gate view failed: {exc.status} {exc.message}",
                                      DecisionDetails(error={"status": exc.status,
                                                             "code": exc.code},
                                                      unjudged=True)))
            continue
        if view.version != record.version:
            # The binding moved between the two reads; judge it next tick on one version.
            decisions.append(Decision(role, Action.HOLD, record.version,
                                      record.binding.stage.value,
                                      "binding changed while reading; next tick"))
            continue
        # Stage ages are read on the router's clock (Redis TIME), never this host's:
        # a gatekeeper whose clock runs ahead must not promote a stage early.
        at = view_time(view, now)
        try:
            decision = decide(role, record, evidence_from_view(view), at)
        except Exception as exc:  # noqa: BLE001 - any bug judging one role, see below
            # A role decide() cannot judge (a figure it cannot read: a bug, not a verdict)
            # is held and named, as a failing gate view is; the other roles are still judged.
            log.exception("judging %s failed, holding it this tick", role)
            decisions.append(Decision(role, Action.HOLD, record.version,
                                      record.binding.stage.value,
                                      f"judging failed: {type(exc).__name__}",
                                      DecisionDetails(unjudged=True)))
            continue
        try:
            decisions.append(_act(api, decision, dry_run=dry_run, notifier=notifier))
        except ApiError as exc:
            # The move itself failed (a 5xx): report it, and go on judging the others.
            log.error("%s of %s failed: %s", decision.action.value, role, exc)
            decisions.append(dataclasses.replace(decision, details=decision.details.with_(
                outcome="failed",
                error={"status": exc.status, "code": exc.code, "message": exc.message})))
        _alert(decision, view, notifier, alerted)
        _ask_approval(decision, notifier, alerted)
        _warn(decision, notifier, alerted)
        _relay_tripwire(record, at, notifier, alerted)
    return decisions


def view_time(view: GateView, fallback: float) -> float:
    """The router's clock when it built `view` (its `time`), else `fallback`."""
    return float(view.time) if math.isfinite(view.time) else fallback


def _relay_tripwire(record: VersionedBinding, now: float, notifier: Notifier | None,
                    announced: set[str] | None) -> None:
    """Announce a recent rollback the router's tripwire made (it has no webhooks of its own)."""
    if notifier is None or announced is None or record.updated_by != TRIPWIRE_ACTOR:
        return
    if now - record.updated_at > TRIPWIRE_RELAY_S:
        return
    key = f"{record.role}|tripwire|{record.version}"
    if key in announced:
        return
    announced.add(key)
    notifier.emit(ROLLBACK, record.role, action="rollback", by=TRIPWIRE_ACTOR,
                  version=record.version, to_stage=record.binding.stage.value,
                  candidate=record.binding.candidate)


def held_by_policy(decision: Decision) -> bool:
    """A hold that gate.responses chose: the gatekeeper pauses the role for a human."""
    response = decision.details.response
    return decision.action is Action.HOLD and response is not None and response.applied == "hold"


def _act(api: ApiClient, decision: Decision, *, dry_run: bool,
         notifier: Notifier | None) -> Decision:
    held = held_by_policy(decision)
    if decision.action not in (Action.ADVANCE, Action.ROLLBACK) and not held:
        return decision
    if dry_run:
        return dataclasses.replace(decision, details=decision.details.with_(outcome="dry_run"))
    verb = "pause" if held else "promote" if decision.action is Action.ADVANCE else "rollback"
    body = {"reason": f"gatekeeper: {decision.reason}"[:2000],
            "details": {"gatekeeper": decision.details.as_json()}}
    try:
        written = _post_move(api, decision, verb, body)
    except ApiError as exc:
        if exc.status not in REFUSALS:
            raise
        log.info("%s of %s at version %d refused: %s", verb, decision.role, decision.version,
                 exc.message)
        if notifier is not None:
            notifier.emit(REFUSED, decision.role, action=verb, version=decision.version,
                          status=exc.status, error=exc.message, decision=decision.as_dict())
        return dataclasses.replace(decision, details=decision.details.with_(
            outcome="refused", error=exc.message))
    binding = written.get("binding", {})
    log.info("%s %s: %s (now version %s)", verb, decision.role, decision.reason,
             written.get("version"))
    if notifier is not None:
        kind = HOLD_EVENT if held else STAGE_CHANGE if decision.action is Action.ADVANCE \
            else ROLLBACK
        notifier.emit(kind, decision.role, action=verb, from_stage=decision.stage,
                      to_stage=binding.get("stage"), share=binding.get("share"),
                      version=written.get("version"), reason=decision.reason,
                      details=decision.details.as_json())
    return dataclasses.replace(decision, details=decision.details.with_(
        outcome="applied", new_version=written.get("version")))


def _post_move(api: ApiClient, decision: Decision, verb: str,
               body: dict[str, Any]) -> dict[str, Any]:
    """POST the move; a rollback or a pause whose details the router refuses (422: a router
    of another version reading another shape) is sent again with them as text. A move
    that makes the role safer is never held over how its figures are recorded; a
    promotion is (it stays refused, and the role waits)."""
    path = f"/v1/bindings/{_path(decision.role)}/{verb}"
    try:
        written: dict[str, Any] = api.post(path, body, version=decision.version)
    except ApiError as exc:
        if exc.status != 422 or verb == "promote":
            raise
        log.error("the router refused the details of %s's %s (%s): sent as text",
                  decision.role, verb, exc.message)
        text = {"gatekeeper_details_refused": exc.message[:2000],
                "gatekeeper_json": json.dumps(body["details"]["gatekeeper"])[:20000]}
        written = api.post(path, {**body, "details": text}, version=decision.version)
    return written


def _alert(decision: Decision, view: GateView, notifier: Notifier | None,
           alerted: set[str] | None) -> None:
    """Raise each drift alarm once per process, not once per tick."""
    drift = view.drift
    for alarm in [] if drift is None else drift.alarms:
        config = view.current if alarm.arm == "current" else view.candidate
        key = f"{decision.role}|{config}|{alarm.arm}|{alarm.metric}"
        if alerted is not None:
            if key in alerted:
                continue
            alerted.add(key)
        log.warning("drift alarm on %s %s (%s): %s", decision.role, alarm.arm, config,
                    alarm.metric)
        if notifier is not None:
            detector = (drift.candidate if alarm.arm == "candidate" else drift.current).get(
                alarm.metric) if drift is not None else None
            notifier.emit(ALARM, decision.role, arm=alarm.arm, config=config,
                          metric=alarm.metric,
                          cusum={} if detector is None else detector.as_json())


def _ask_approval(decision: Decision, notifier: Notifier | None,
                  alerted: set[str] | None) -> None:
    """Tell people once (per role and version) that a passed step waits for their approval."""
    if notifier is None or not decision.details.awaiting_approval:
        return
    key = f"{decision.role}|approval|{decision.version}"
    if alerted is not None:
        if key in alerted:
            return
        alerted.add(key)
    notifier.emit(APPROVAL_NEEDED, decision.role, action="approve", version=decision.version,
                  stage=decision.stage, reason=decision.reason, details=decision.details.as_json())


def _warn(decision: Decision, notifier: Notifier | None, alerted: set[str] | None) -> None:
    """Notify once (per role, version and rule) of a rule gate.responses only warns on."""
    for warning in decision.details.warnings or ():
        key = f"{decision.role}|warn|{decision.version}|{warning.rule}"
        if alerted is not None:
            if key in alerted:
                continue
            alerted.add(key)
        log.warning("%s: %s would roll back, warned only (%s): %s", decision.role,
                    warning.rule, warning.policy, warning.reason)
        if notifier is not None:
            notifier.emit(WARNING, decision.role, rule=warning.rule, policy=warning.policy,
                          reason=warning.reason, version=decision.version, stage=decision.stage)


def default_holder() -> str:
    """A lease holder id unique to this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Gatekeeper:
    """The loop: lease, tick, sleep; stops cleanly on request (SIGTERM)."""

    def __init__(self, api: ApiClient, *, interval: float = 5.0, lease_ttl: float | None = None,
                 holder: str | None = None, dry_run: bool = False,
                 notifier: Notifier | None = None,
                 echo: Callable[[Decision], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.interval = interval
        # The lease must outlive a tick plus a sleep, or a healthy leader loses it.
        self.lease_ttl = lease_ttl if lease_ttl is not None else max(3 * interval, 5.0)
        self.holder = holder or default_holder()
        self.dry_run = dry_run
        self.notifier = notifier
        self.echo = echo
        self.clock = clock
        self.leader = False
        #: Ticks this process has run (as leader, or dry).
        self.ticks = 0
        self.alerted: set[str] = set()
        #: The online judges' breakers (`gatekeeper.judging`).
        self.judges = Judges()
        self._stop = threading.Event()

    def request_stop(self, *_: Any) -> None:
        """Ask the loop to exit after the current tick (the SIGTERM handler)."""
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT finish the current tick, then exit."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    def acquire(self) -> bool:
        """Take or renew the lease; False when another gatekeeper holds it."""
        try:
            self.api.post("/v1/gatekeeper/lease", {"holder": self.holder,
                                                    "ttl_s": self.lease_ttl})
        except ApiError as exc:
            if exc.status != 409:
                raise
            if self.leader:
                log.warning("lost the gatekeeper lease to %s", exc.details.get("holder"))
            self.leader = False
            return False
        if not self.leader:
            log.info("gatekeeper %s holds the lease", self.holder)
        self.leader = True
        return True

    def release(self) -> None:
        """Give the lease up if this process holds it."""
        if not self.leader:
            return
        try:
            self.api.request("DELETE", "/v1/gatekeeper/lease", json={"holder": self.holder})
        except ApiError as exc:
            log.info("lease release refused: %s", exc.message)
        self.leader = False

    def once(self) -> list[Decision]:
        """One tick under the lease; [] when another gatekeeper leads.

        A dry run writes nothing, so it neither needs nor takes the lease (and
        never keeps the real leader from acting).
        """
        if not self.dry_run and not self.acquire():
            self.beat([], [])
            return []
        if not self.dry_run:
            # Judged verdicts first, so this tick's gate view counts them.
            judge_tick(self.api, self.clock(), self.judges, rounds=JUDGE_ROUNDS)
        decisions = tick(self.api, self.clock(), dry_run=self.dry_run,
                         notifier=self.notifier, alerted=self.alerted)
        self.ticks += 1
        self.beat(decisions, [f"{role}: its gate view failed" for role in unjudged(decisions)])
        if self.echo is not None:
            for decision in decisions:
                self.echo(decision)
        return decisions

    def beat(self, decisions: list[Decision], errors: list[str]) -> None:
        """Tell the router this process ticked (`gatekeeper.heartbeat`); never fails a tick.

        A standby (the lease is another's) beats too, as `leader: false`, so the
        dashboard can list it; only a leader's beat says someone is judging.
        """
        body = {"holder": self.holder, "leader": self.leader and not self.dry_run,
                "interval_s": max(self.interval, 0.01), "roles_judged": len(decisions),
                "errors": [e[:500] for e in errors[:50]], "dry_run": self.dry_run}
        try:
            self.api.post("/v1/gatekeeper/heartbeat", body)
        except (ApiError, OSError) as exc:
            log.info("heartbeat not recorded: %s", exc)

    def run(self, *, max_ticks: int | None = None) -> None:
        """Loop until asked to stop (or after `max_ticks`), then release the lease."""
        ticks = 0
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    self.once()
                except (ApiError, OSError) as exc:
                    # A router hiccup costs one tick, not the process; the next retries.
                    log.warning("tick failed: %s", exc)
                    self.beat([], [f"tick failed: {exc}"])
                ticks += 1
                if max_ticks is not None and ticks >= max_ticks:
                    break
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            self.release()
