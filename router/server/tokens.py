"""Bearer tokens: who holds them, their scope, and the roles they may act on.

Two sources, merged:

- `ROLEGATE_TOKENS`: comma-separated `[name=]token:scope[:roles]` entries, the
  token in clear (fine for a container's environment; simplest for a laptop).
- `ROLEGATE_TOKENS_FILE`: one `name=sha256:<hex>:scope[:roles]` entry a line
  (`#` comments, blank lines ignored), the token stored only as its SHA-256, so
  the file can be read by more people than the tokens are given to. It is
  re-read when it changes (checked at most once a second per worker); a file
  that no longer parses keeps the last good table and logs why.

`roles` is `role1|role2` or `*`; absent or `*` means every role. Scopes:
`caller`, `reviewer`, `gatekeeper`, `operator` (operator may do everything).
Unnamed tokens are named by scope and a short hash, never by the token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("rolegate.tokens")

SCOPES = ("caller", "reviewer", "gatekeeper", "operator")
#: "name=rest", where rest must not itself start with "=" (base64 padding).
_NAMED = re.compile(r"([A-Za-z][A-Za-z0-9_.-]*)=([^=].*)", re.DOTALL)
_ROLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
#: How often a worker looks at the tokens file's modification time.
FILE_CHECK_S = 1.0
#: What a new token starts with, so a leaked one is recognisable in a scan.
TOKEN_PREFIX = "rg_"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the actor's name, the token's scope, the roles it may act on."""

    name: str
    scope: str
    #: None: every role.
    roles: frozenset[str] | None = None

    def may(self, role: str) -> bool:
        """Whether this token may resolve, read and report for `role`."""
        return self.roles is None or role in self.roles


def digest(token: str) -> bytes:
    """The SHA-256 of a token, as kept in memory and (hex) in the tokens file."""
    return hashlib.sha256(token.encode()).digest()


def _roles(raw: str, where: str) -> frozenset[str] | None:
    if raw in ("", "*"):
        return None
    names = raw.split("|")
    bad = [name for name in names if not _ROLE.fullmatch(name)]
    if bad:
        raise ValueError(f"{where}: role list must be role names separated by '|' "
                         f"(or '*'), got {bad[0]!r}")
    return frozenset(names)


def _split_scope(rest: str, where: str) -> tuple[str, str, frozenset[str] | None]:
    """`token:scope[:roles]` -> (token, scope, roles); the token may itself hold ':'."""
    head, _, last = rest.rpartition(":")
    if last in SCOPES and head:
        return head, last, None
    token, _, scope = head.rpartition(":")
    if scope in SCOPES and token:
        return token, scope, _roles(last, where)
    raise ValueError(f"{where} must be token:scope or token:scope:roles with scope one of "
                     f"{', '.join(SCOPES)}")


def parse_tokens(spec: str) -> list[tuple[bytes, Principal]]:
    """Parse ROLEGATE_TOKENS into (token digest, principal); ValueError names a bad entry.

    The error never quotes the token.
    """
    entries: list[tuple[bytes, Principal]] = []
    for index, raw in enumerate(part.strip() for part in spec.split(",")):
        if not raw:
            continue
        named = _NAMED.fullmatch(raw)
        name, rest = (named.group(1), named.group(2)) if named else ("", raw)
        token, scope, roles = _split_scope(rest, f"ROLEGATE_TOKENS entry {index + 1}")
        if not name:
            name = f"{scope}-{hashlib.sha256(token.encode()).hexdigest()[:8]}"
        entries.append((digest(token), Principal(name=name, scope=scope, roles=roles)))
    return entries


def parse_tokens_file(text: str, source: str = "tokens file") -> list[tuple[bytes, Principal]]:
    """Parse a tokens file: `name=sha256:<64 hex>:scope[:roles]` a line; ValueError names the line."""
    entries: list[tuple[bytes, Principal]] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source} line {number}"
        named = _NAMED.fullmatch(line)
        if named is None:
            raise ValueError(f"{where} must start with a name: name=sha256:<hex>:scope")
        name, rest = named.group(1), named.group(2)
        algorithm, _, rest = rest.partition(":")
        hashed, scope, roles = _split_scope(rest, where)
        if algorithm != "sha256" or not _HEX_DIGEST.fullmatch(hashed):
            raise ValueError(f"{where}: the token must be stored as sha256:<64 lowercase hex>")
        entries.append((bytes.fromhex(hashed), Principal(name=name, scope=scope, roles=roles)))
    return entries


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def file_line(name: str, token: str, scope: str, roles: list[str] | None = None) -> str:
    """The tokens-file line for `token` (validated by parsing it back)."""
    role_part = f":{'|'.join(roles)}" if roles else ""
    line = f"{name}={'sha256'}:{hashlib.sha256(token.encode()).hexdigest()}:{scope}{role_part}"
    parse_tokens_file(line, "the new line")
    return line


class TokenTable:
    """Looks a presented token up, comparing digests in constant time per entry."""

    def __init__(self, spec: str | None, path: str | None = None) -> None:
        self.open = spec is None and path is None
        self._static = parse_tokens(spec) if spec else []
        self.path = Path(path) if path else None
        self._file_entries: list[tuple[bytes, Principal]] = []
        self._stamp: tuple[int, int, int] | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        if self.path is not None:
            # At boot a missing or broken file stops the server: better than running
            # with fewer tokens than the operator meant, or none.
            self._file_entries = self._read(self.path)

    @property
    def entries(self) -> list[tuple[bytes, Principal]]:
        """Every (digest, principal), from the environment and the file."""
        return self._static + self._file_entries

    def lookup(self, presented: str) -> Principal | None:
        """The principal owning `presented`, comparing every entry in constant time."""
        self.reload_if_changed()
        found: Principal | None = None
        candidate = digest(presented)
        for token, principal in self.entries:
            # No early exit: timing must not tell how many entries were tried.
            if hmac.compare_digest(token, candidate):
                found = principal
        return found

    def reload_if_changed(self, *, force: bool = False) -> bool:
        """Re-read the tokens file if it changed (at most once a second); True if reloaded."""
        if self.path is None:
            return False
        now = time.monotonic()
        if not force and now - self._checked < FILE_CHECK_S:
            return False
        with self._lock:
            self._checked = now
            try:
                stamp = _stamp(self.path)
            except OSError as exc:
                log.error("tokens file %s unreadable, keeping the last table: %s", self.path, exc)
                return False
            if stamp == self._stamp and not force:
                return False
            try:
                self._file_entries = self._read(self.path)
            except (OSError, ValueError) as exc:
                log.error("tokens file %s not reloaded, keeping the last table: %s",
                          self.path, exc)
                return False
            log.info("tokens file %s reloaded: %d entries", self.path, len(self._file_entries))
            return True

    def _read(self, path: Path) -> list[tuple[bytes, Principal]]:
        stamp = _stamp(path)
        entries = parse_tokens_file(path.read_text(), str(path))
        self._stamp = stamp
        return entries


def _stamp(path: Path) -> tuple[int, int, int]:
    """What tells a changed file: inode (a rename over it), size and mtime in ns."""
    status = os.stat(path)
    return status.st_ino, status.st_size, status.st_mtime_ns
