"""Operator commands over the binding table, all through the HTTP API.

`rolegate bindings list|show|history|import|export|restore-snapshot|accept-redis`, and the rollout
moves `canary`, `rollback`, `promote`, `pause`, `resume`, `approve`, plus `resolve` to ask the
router what a job key gets. Exit codes: see `router.cli.common`.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
import requests
from pydantic import ValidationError

from bindings.models import Binding, BindingFile
from rolegate.http import ApiClient, ApiError
from router.cli.common import (
    EXIT_REFUSED,
    EXIT_USAGE,
    api_command,
    echo_json,
    field_errors,
    percent_hint,
)

#: Fields the server sets itself; an import neither sends nor compares them.
SERVER_FIELDS = frozenset({"stage_since"})
#: Fields the server draws when a rollout begins (bindings.bucketing): sent and compared
#: only when the file sets them.
DRAWN_FIELDS = frozenset({"salt", "bucket_version"})


def _not_compared(wanted: Binding) -> set[str]:
    return set(SERVER_FIELDS) | (set(DRAWN_FIELDS) - wanted.model_fields_set)


def role_path(role: str, suffix: str = "") -> str:
    """The API path of a role, its name escaped so it stays one path segment."""
    return f"/v1/bindings/{quote(role, safe='')}{suffix}"


def same_binding(stored: Binding, wanted: Binding) -> bool:
    """True when `wanted` would change nothing in `stored` (server-set and -drawn fields aside)."""
    return stored.model_dump(exclude=_not_compared(wanted)) == wanted.model_dump(
        exclude=_not_compared(wanted))


def load_bindings_or_exit(path: str) -> BindingFile:
    """Read a `{"roles": {...}}` file, or exit 1 naming each wrong field (no pydantic dump)."""
    try:
        return BindingFile.model_validate_json(Path(path).read_bytes())
    except ValidationError as exc:
        problems = field_errors(exc)
    except (OSError, ValueError) as exc:
        problems = [str(exc)]
    click.echo(f"error: {path} is not a valid bindings file:", err=True)
    for problem in problems:
        click.echo(f"  {problem}", err=True)
    sys.exit(EXIT_REFUSED)


def _summary(record: dict[str, Any]) -> str:
    binding = record["binding"]
    candidate = binding.get("candidate") or "-"
    paused = ", paused" if binding.get("paused") else ""
    return (f"{record['role']}: version {record['version']}, stage {binding['stage']}, "
            f"share {binding['share']:g}, current {binding['current']}, "
            f"candidate {candidate}{paused}")


def _post_move(api: ApiClient, role: str, move: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a rollout move against the version just read (If-Match), with an Idempotency-Key.

    The client retries a request that timed out with the same key, so a move the
    server already applied is answered again instead of applied twice. When the
    router cannot tell whether the move landed (504 outcome_unknown), the role
    is read back and the user told which it was.
    """
    version = api.get(role_path(role))["version"]
    try:
        answer: dict[str, Any] = api.post(role_path(role, f"/{move}"), body, version=version,
                                          headers={"Idempotency-Key": uuid.uuid4().hex})
    except ApiError as exc:
        if exc.status != 504 or exc.code != "outcome_unknown":
            raise
        return _read_back(api, role, move, body, version, exc.details)
    return answer


def _read_back(api: ApiClient, role: str, move: str, body: dict[str, Any],
               version: int, details: dict[str, Any]) -> dict[str, Any]:
    """After an unknown outcome: the role read back, or exit 2 saying it was not applied."""
    if details.get("condition") == "replication_timeout":
        # Applied on the primary; what is unknown is whether it outlives a failover.
        click.echo(f"warning: the {move} is on the Redis primary but only "
                   f"{details.get('replicas')} of {details.get('required')} replicas "
                   "confirmed it: it may be lost if the primary fails now; reading "
                   f"{role} back", err=True)
    else:
        click.echo(f"warning: the router could not confirm the {move}: it may or may not "
                   f"have been applied; reading {role} back", err=True)
    for attempt in range(READ_BACK_ATTEMPTS):
        try:
            record: dict[str, Any] = api.get(role_path(role))
            newer = record["version"] - version
            entries = api.get(role_path(role, "/history"),
                              params={"limit": max(1, newer)})["entries"] if newer > 0 else []
            break
        except (ApiError, requests.ConnectionError, requests.Timeout) as exc:
            # A router that just saw Redis time out fails fast for a moment: ask again.
            if attempt + 1 < READ_BACK_ATTEMPTS and not (
                    isinstance(exc, ApiError) and exc.status < 500):
                time.sleep(READ_BACK_PAUSE_S)
                continue
            click.echo(f"error: the outcome is unknown and {role} could not be read back "
                       f"({exc}); check with 'rolegate bindings show {role}' before retrying",
                       err=True)
            sys.exit(EXIT_USAGE)
    ours = [e for e in entries if e["version"] == version + 1 and e["reason"] == body["reason"]
            and e["action"] in MOVE_ACTIONS[move]]
    if ours:
        click.echo(f"the {move} was applied: {role} went to version {version + 1}", err=True)
        return record
    click.echo(f"error: the {move} was not applied: {role} is at version {record['version']} "
               f"(it was at {version}); it is safe to run the command again", err=True)
    sys.exit(EXIT_USAGE)


#: Read-backs after an unknown outcome, a pause apart (the router's breaker cools for 1 s).
READ_BACK_ATTEMPTS = 4
READ_BACK_PAUSE_S = 1.0
#: The history actions each move records.
MOVE_ACTIONS = {"canary": {"canary"}, "rollback": {"rollback", "restore"},
                "promote": {"promote"}, "pause": {"pause"}, "resume": {"resume"},
                "approve": {"approve"}}


@click.group()
def bindings() -> None:
    """Read, import and export the binding table."""


@bindings.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
@api_command
def list_roles(api: ApiClient, as_json: bool) -> None:
    """Every role with its version, stage, share and configs."""
    table = api.get("/v1/bindings?view=full")
    if as_json:
        echo_json(table)
        return
    rows = [("ROLE", "VERSION", "STAGE", "SHARE", "CURRENT", "CANDIDATE", "PAUSED")]
    for role, record in sorted(table["roles"].items()):
        b = record["binding"]
        rows.append((role, str(record["version"]), b["stage"], f"{b['share']:g}", b["current"],
                     b.get("candidate") or "-", "yes" if b.get("paused") else "no"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


@bindings.command("show")
@click.argument("role")
@api_command
def show(api: ApiClient, role: str) -> None:
    """One role's binding and version, as JSON."""
    echo_json(api.get(role_path(role)))


@bindings.command("history")
@click.argument("role")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Newest N changes.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
@api_command
def history(api: ApiClient, role: str, limit: int | None, as_json: bool) -> None:
    """A role's changes, newest first: version, time, actor, action, reason."""
    params = {"limit": limit} if limit else None
    answer = api.get(role_path(role, "/history"), params=params)
    if as_json:
        echo_json(answer)
        return
    for entry in answer["entries"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(entry["time"]))
        b = entry["binding"]
        click.echo(f"v{entry['version']:<4} {when}Z  {entry['actor']:<16} {entry['action']:<9} "
                   f"{b['stage']} {b['share']:g}  {entry['reason']}")


@bindings.command("import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--reason", default=None, help="Recorded in history (default: the file name).")
@click.option("--dry-run", is_flag=True, help="Say what would change; write nothing.")
@api_command
def import_file(api: ApiClient, path: str, reason: str | None, dry_run: bool) -> None:
    """Make the table match PATH: create or update roles that differ, leave the rest.

    Idempotent: a second run prints `unchanged` for every role. Roles on the
    server but not in the file are left alone.
    """
    wanted = load_bindings_or_exit(path)
    why = reason or f"imported from {Path(path).name}"
    table = api.get("/v1/bindings?view=full")
    stored = table["roles"]
    _refuse_a_stale_table(table.get("lost") or {}, dry_run)
    for role, binding in wanted.roles.items():
        body = {"binding": binding.model_dump(mode="json", exclude=_not_compared(binding)),
                "reason": why}
        record = stored.get(role)
        if record is None:
            outcome = "created"
            if not dry_run:
                api.put(role_path(role), body)
        elif same_binding(Binding.model_validate(record["binding"]), binding):
            outcome = "unchanged"
        else:
            outcome = "updated"
            if not dry_run:
                # If-Match: the version we compared against; a change in between is a 409.
                api.put(role_path(role), body, version=record["version"])
        click.echo(f"{role}: {outcome}{' (dry run)' if dry_run and outcome != 'unchanged' else ''}")


def _refuse_a_stale_table(lost: dict[str, str], dry_run: bool) -> None:
    """While Redis lost roles, say what an import would do (nothing useful) and stop.

    The router's table is then its kept copy: a role the file matches would
    be left lost (no write), another refused (its version is not Redis's).
    """
    if not lost:
        return
    named = "; ".join(f"{role} ({why})" for role, why in sorted(lost.items()))
    click.echo(f"Redis lost data: {named}. The router serves its kept copies, so an import "
               "now compares the file against them and would leave those roles lost. "
               "First run `rolegate bindings restore-snapshot` (write the routers' table "
               "back) or `rolegate bindings accept-redis` (keep Redis's, after a restore), "
               "then import again." + ("" if dry_run else " Nothing written."), err=True)
    if not dry_run:
        sys.exit(EXIT_REFUSED)


@bindings.command("export")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write to this file instead of stdout.")
@api_command
def export(api: ApiClient, output: str | None) -> None:
    """The whole table as a `{"roles": {...}}` file that `import` reads back."""
    table = api.get("/v1/bindings?view=full")
    document = {"roles": {role: record["binding"]
                          for role, record in sorted(table["roles"].items())}}
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    if output:
        Path(output).write_text(text)
    else:
        click.echo(text, nl=False)


class ShareType(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2
    """A share as a fraction of 1; `10%` is refused saying that 0.1 means 10%."""

    name = "share"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        """The share as a float (0.1), or a usage error naming the fraction meant."""
        if isinstance(value, float):
            return value
        text = str(value).strip()
        if text.endswith("%"):
            hint = percent_hint(text)
            self.fail(f"{text!r}: a share is a fraction of 1{hint}", param, ctx)
        try:
            return float(text)
        except ValueError:
            self.fail(f"{text!r} is not a number (a share is a fraction of 1: 0.1 means 10%)",
                      param, ctx)


@bindings.command("restore-snapshot")
@click.option("--reason", default=None, help="Recorded in each role's history.")
@click.option("--discard", is_flag=True,
              help="Archive the lost roles instead of bringing them back.")
@api_command
def restore_snapshot(api: ApiClient, reason: str | None, discard: bool) -> None:
    """After Redis lost data, write the roles it lost back from the router's last good table.

    /healthz says `redis_data_lost` while routers serve those roles from their
    kept copy. Each is written one version above the kept one with a
    `restore_snapshot` history entry (`discard_snapshot`, archived, with --discard).
    """
    body: dict[str, Any] = {"discard": discard}
    if reason:
        body["reason"] = reason
    answer = api.post("/v1/restore-snapshot", body)
    verb = "discarded (archived)" if discard else "restored"
    done = answer["discarded" if discard else "restored"]
    if not answer["lost"]:
        click.echo("Redis holds every role of the router's table: nothing to restore")
    for role, version in sorted(done.items()):
        click.echo(f"{role}: {verb} as version {version} ({answer['lost'][role]})")
    for role, why in sorted(answer["skipped"].items()):
        click.echo(f"{role}: left alone: {why}")
    if answer["still_lost"]:
        click.echo(f"still lost: {', '.join(answer['still_lost'])}", err=True)
        sys.exit(EXIT_REFUSED)


@bindings.command("accept-redis")
@click.option("--reason", default=None, help="Recorded in each role's history.")
@api_command
def accept_redis(api: ApiClient, reason: str | None) -> None:
    """After Redis was restored from a backup on purpose, make every router serve its table.

    Routers hold newer records than the restored Redis and report
    `redis_data_lost`. Each role they hold above Redis gets Redis's own record
    (archived where Redis has none) one version above the held one, with an
    `accept_redis` history entry; every router takes it at its next poll.
    """
    body: dict[str, Any] = {}
    if reason:
        body["reason"] = reason
    answer = api.post("/v1/accept-redis", body)
    if not answer["lost"]:
        click.echo("the routers hold nothing above Redis's table: nothing to accept")
    for role, version in sorted(answer["accepted"].items()):
        click.echo(f"{role}: Redis's record taken as version {version} "
                   f"({answer['lost'][role]})")
    for role, why in sorted(answer["skipped"].items()):
        click.echo(f"{role}: left alone: {why}")
    if answer["still_lost"]:
        click.echo(f"still lost: {', '.join(answer['still_lost'])}", err=True)
        sys.exit(EXIT_REFUSED)


@click.command()
@click.argument("role")
@click.argument("share", type=ShareType())
@click.option("--reason", default="canary share set from the CLI", show_default=True)
@api_command
def canary(api: ApiClient, role: str, share: float, reason: str) -> None:
    """Route SHARE (0..1] of ROLE's jobs to its candidate; 1 means full."""
    click.echo(_summary(_post_move(api, role, "canary", {"share": share, "reason": reason})))


@click.command()
@click.argument("role")
@click.option("--to-version", type=click.IntRange(min=1), default=None,
              help="Restore this earlier version (as a new one) instead of zeroing the canary.")
@click.option("--reason", required=True, help="Why; recorded in history.")
@api_command
def rollback(api: ApiClient, role: str, to_version: int | None, reason: str) -> None:
    """Zero ROLE's canary (candidate kept), or restore an earlier version."""
    body: dict[str, Any] = {"reason": reason}
    if to_version is not None:
        body["to_version"] = to_version
    click.echo(_summary(_post_move(api, role, "rollback", body)))


def _move(name: str, help_text: str) -> click.Command:
    @click.command(name=name, help=help_text)
    @click.argument("role")
    @click.option("--reason", required=True, help="Why; recorded in history.")
    @api_command
    def command(api: ApiClient, role: str, reason: str) -> None:
        click.echo(_summary(_post_move(api, role, name, {"reason": reason})))

    return command


promote = _move("promote", "Advance ROLE's rollout one step (shadow, canary steps, full, stable).")
pause = _move("pause", "Stop the gatekeeper from moving ROLE.")
resume = _move("resume", "Let the gatekeeper move ROLE again.")
approve = _move("approve", "Approve the step ROLE stands on (one with \"approval\": true), so "
                           "the gatekeeper may advance past it once the gate passes.")


@click.command()
@click.argument("role")
@click.option("--key", default=None, help="The job key (the router draws one when absent).")
@click.option("--attr", "attrs", multiple=True, metavar="NAME=VALUE",
              help="A job attribute for the role's targeting rules (repeatable).")
@api_command
def resolve(api: ApiClient, role: str, key: str | None, attrs: tuple[str, ...]) -> None:
    """Ask the router which config serves ROLE for job KEY (with its --attr attributes)."""
    params: dict[str, str] = {"key": key} if key else {}
    for attr in attrs:
        name, sep, value = attr.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{attr!r}: expected NAME=VALUE", param_hint="--attr")
        params[f"attr.{name}"] = value
    echo_json(api.get(f"/v1/resolve/{quote(role, safe='')}", params=params or None))


def register(main: click.Group) -> None:
    """Add the binding commands to the `rolegate` command group."""
    main.add_command(bindings)
    for command in (canary, rollback, promote, pause, resume, approve, resolve):
        main.add_command(command)
