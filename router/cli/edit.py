"""Editing a binding without a file or a hand-written If-Match; archiving and restoring a role.

`rolegate bindings set ROLE key=value ...` (dotted keys: gate.thresholds.min_samples=300),
`bindings edit ROLE` ($EDITOR), `bindings new ROLE --current CFG` (the documented
defaults), `bindings archive ROLE --reason`, `bindings restore ROLE --reason`.

Each edit reads the role's version, validates the result with the same model the
server uses (so a typo is refused here, naming the field), writes it back with
`If-Match: <version>` (a change in between is a 409, never lost), and prints the diff.
"""

from __future__ import annotations

import difflib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from bindings.models import Binding
from rolegate.http import ApiClient
from router.cli.bindings import SERVER_FIELDS, bindings, role_path
from router.cli.common import EXIT_REFUSED, api_command, field_errors


def parse_value(text: str) -> Any:
    """A value as JSON when it parses as JSON (300, true, null, [0.1, 1]), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def assign(document: dict[str, Any], assignment: str) -> dict[str, Any]:
    """A copy of `document` with `a.b.c=value` applied; ValueError naming what is wrong."""
    key, sep, raw = assignment.partition("=")
    path = key.split(".")
    if not sep or not key or any(not part for part in path):
        raise ValueError(f"{assignment!r}: expected KEY=VALUE with a dotted KEY "
                         "(gate.thresholds.min_samples=300)")
    out: dict[str, Any] = json.loads(json.dumps(document))  # a deep copy of plain JSON
    node = out
    for depth, part in enumerate(path[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(path[:depth + 1])
            # A user's KEY=VALUE, not a programming error: ValueError, like the rest.
            raise ValueError(  # noqa: TRY004
                f"{assignment!r}: {where} is {json.dumps(child)}, not an object")
        node = child
    node[path[-1]] = parse_value(raw)
    return out


def editable(binding: dict[str, Any]) -> dict[str, Any]:
    """The binding as an operator edits it: without the fields the server sets."""
    return {k: v for k, v in binding.items() if k not in SERVER_FIELDS}


def as_text(binding: dict[str, Any]) -> str:
    """A binding as stable, diffable JSON text."""
    return json.dumps(binding, indent=2, sort_keys=True) + "\n"


def diff(role: str, old: dict[str, Any], new: dict[str, Any]) -> str:
    """A unified diff of two bindings' JSON."""
    return "".join(difflib.unified_diff(as_text(old).splitlines(keepends=True),
                                        as_text(new).splitlines(keepends=True),
                                        f"{role} (stored)", f"{role} (new)"))


def problems(document: Any) -> list[str]:
    """What is wrong with `document` as a Binding (`field: message` each); [] when valid."""
    try:
        Binding.model_validate(document)
    except ValidationError as exc:
        return field_errors(exc, whole="binding")
    return []


def validated(role: str, document: Any) -> Binding:
    """`document` as a Binding, or exit 1 printing each field that is wrong."""
    wrong = problems(document)
    if wrong:
        click.echo(f"error: the new binding of {role} is invalid:", err=True)
        for problem in wrong:
            click.echo(f"  {problem}", err=True)
        sys.exit(EXIT_REFUSED)
    return Binding.model_validate(document)


def write(api: ApiClient, role: str, record: dict[str, Any], new: dict[str, Any],
          reason: str, dry_run: bool) -> None:
    """Validate `new`, print the diff against `record`, and PUT it with If-Match."""
    old = editable(record["binding"])
    binding = validated(role, new)
    wanted = editable(binding.model_dump(mode="json"))
    if wanted == editable(Binding.model_validate(old).model_dump(mode="json")):
        click.echo(f"{role}: unchanged (version {record['version']})")
        return
    click.echo(diff(role, old, new), nl=False)
    if dry_run:
        click.echo(f"{role}: not written (dry run)")
        return
    written = api.put(role_path(role), {"binding": wanted, "reason": reason},
                      version=record["version"])
    click.echo(f"{role}: version {record['version']} -> {written['version']}")


@bindings.command("set")
@click.argument("role")
@click.argument("assignments", nargs=-1, required=True, metavar="KEY=VALUE...")
@click.option("--reason", default=None, help="Recorded in history (default: the assignments).")
@click.option("--dry-run", is_flag=True, help="Show the diff; write nothing.")
@api_command
def set_fields(api: ApiClient, role: str, assignments: tuple[str, ...], reason: str | None,
               dry_run: bool) -> None:
    """Change fields of ROLE's binding: gate.thresholds.min_samples=300 steps='[0.2, 1]'.

    Values are JSON when they parse as JSON, else strings.
    """
    record = api.get(role_path(role))
    new = editable(record["binding"])
    for assignment in assignments:
        try:
            new = assign(new, assignment)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="KEY=VALUE") from None
    write(api, role, record, new, reason or "set " + " ".join(assignments), dry_run)


@bindings.command("edit")
@click.argument("role")
@click.option("--reason", default=None, help="Recorded in history (default: edited in $EDITOR).")
@api_command
def edit(api: ApiClient, role: str, reason: str | None) -> None:
    """Open ROLE's binding in $EDITOR; on save, validate it and write it with If-Match.

    An edit that does not parse or validate is reopened with the errors on top
    (as `kubectl edit` does), the edits kept; saving it unchanged, or emptying
    it, gives up, and the edits are kept in a file whose path is printed.
    """
    record = api.get(role_path(role))
    text = as_text(editable(record["binding"]))
    failed: str | None = None
    while True:
        saved = click.edit(text, extension=".json")
        body = None if saved is None else strip_comments(saved)
        if body is None or not body.strip() or body == failed:
            if failed is None:
                why = "editor closed without saving" if body is None else "emptied"
                click.echo(f"{role}: unchanged ({why})")
                return
            kept = keep_copy(role, failed)
            click.echo(f"error: edit of {role} abandoned, nothing written; your edits are "
                       f"kept in {kept}", err=True)
            sys.exit(EXIT_REFUSED)
        wrong = edit_problems(body)
        if not wrong:
            write(api, role, record, json.loads(body), reason or "edited in $EDITOR",
                  dry_run=False)
            return
        click.echo(f"error: the edited binding of {role} is invalid, reopening it:", err=True)
        for problem in wrong:
            click.echo(f"  {problem}", err=True)
        failed = body
        text = error_header(wrong) + body


#: Lines of the reopened file that start with this are rolegate's notes, dropped on save
#: (a line of JSON never starts with it).
COMMENT = "#"


def strip_comments(text: str) -> str:
    """The saved text without the notes put on top of it."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith(COMMENT))


def error_header(wrong: list[str]) -> str:
    """The notes on top of a reopened edit: what was wrong, and how to give up."""
    lines = ["# The edit below was not written: fix it and save, or save it unchanged",
             "# (or empty the file) to give up. Lines starting with # are ignored.", "#"]
    lines += [f"#   {problem}" for problem in wrong]
    return "\n".join(lines) + "\n"


def edit_problems(body: str) -> list[str]:
    """What is wrong with the saved text as a binding: JSON first, then the model."""
    try:
        document = json.loads(body)
    except ValueError as exc:
        return [f"not JSON: {exc}"]
    return problems(document)


def keep_copy(role: str, body: str) -> str:
    """Save the abandoned edit to a new temporary file (under $TMPDIR); return its path."""
    handle, path = tempfile.mkstemp(prefix=f"rolegate-edit-{role}-", suffix=".json",
                                    dir=os.environ.get("TMPDIR") or None)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(body)
    return path


@bindings.command("new")
@click.argument("role")
@click.option("--current", required=True, help="The config that serves ROLE now.")
@click.option("--candidate", default=None, help="A config to roll out (stays stable until "
              "promoted).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write a bindings file (`bindings import` reads it) instead of printing.")
@click.option("--create", is_flag=True, help="Create the role on the server.")
@api_command
def new(api: ApiClient, role: str, current: str, candidate: str | None, output: str | None,
        create: bool) -> None:
    """A binding for ROLE with every documented default spelled out."""
    binding = validated(role, {"current": current, "candidate": candidate})
    document = editable(binding.model_dump(mode="json"))
    text = as_text({"roles": {role: document}})
    if create:
        written = api.put(role_path(role), {"binding": document,
                                            "reason": "created with bindings new"})
        click.echo(f"{role}: created (version {written['version']})")
    elif output:
        Path(output).write_text(text)
        click.echo(f"{role}: written to {output}")
    else:
        click.echo(text, nl=False)


@bindings.command("archive")
@click.argument("role")
@click.option("--reason", required=True, help="Why; recorded in history and answered by 410s.")
@api_command
def archive(api: ApiClient, role: str, reason: str) -> None:
    """Archive ROLE: it leaves the table and resolves answer 410; its history stays."""
    version = api.get(role_path(role))["version"]
    api.request("DELETE", role_path(role), json={"reason": reason},
                headers={"If-Match": str(version)})
    click.echo(f"{role}: archived at version {version + 1} ({reason})")


@bindings.command("restore")
@click.argument("role")
@click.option("--reason", required=True, help="Why; recorded in history.")
@api_command
def restore(api: ApiClient, role: str, reason: str) -> None:
    """Bring an archived ROLE back with the binding it had."""
    written = api.post(role_path(role, "/restore"), {"reason": reason})
    binding = written["binding"]
    click.echo(f"{role}: restored as version {written['version']}, stage {binding['stage']}")


def register(main: click.Group) -> None:
    """The commands are on the `bindings` group (imported above); nothing else to add."""
