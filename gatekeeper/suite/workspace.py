"""A fresh temporary workspace per run, holding only that scenario's seed files.

Every path the agent's tools touch is resolved inside the workspace; anything
escaping it (absolute paths, '..', symlinks pointing out) is refused, so a run's
writes stay in its own directory and vanish with it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from gatekeeper.suite.scenario import Scenario, Suite


class WorkspaceEscape(ValueError):
    """A tool tried to reach a path outside the run's workspace."""


class Workspace:
    """One run's directory: created with the seed files, removed on close."""

    def __init__(self, suite: Suite, scenario: Scenario) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"rolegate-{scenario.id}-")).resolve()
        self.seeded: frozenset[str] = frozenset(scenario.seed_files)
        for target in scenario.seed_files:
            destination = self.resolve(target)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(suite.seed_source(scenario, target), destination)

    def resolve(self, relative: str) -> Path:
        """The absolute path of `relative` inside the workspace; WorkspaceEscape if outside."""
        if not relative or os.path.isabs(relative):
            raise WorkspaceEscape(f"path {relative!r} must be relative to the workspace")
        path = (self.root / relative).resolve()
        if path != self.root and self.root not in path.parents:
            raise WorkspaceEscape(f"path {relative!r} leaves the workspace")
        return path

    def files(self) -> list[str]:
        """Every regular file in the workspace, as sorted relative POSIX paths."""
        found = []
        for dirpath, _dirnames, filenames in os.walk(self.root):
            for filename in filenames:
                full = Path(dirpath) / filename
                if full.is_file() and not full.is_symlink():
                    found.append(full.relative_to(self.root).as_posix())
        return sorted(found)

    def read_text(self, relative: str, limit: int = 1_000_000) -> str:
        """The text of a workspace file (at most `limit` characters)."""
        with self.resolve(relative).open(encoding="utf-8", errors="replace") as handle:
            return handle.read(limit)

    def close(self) -> None:
        """Remove the workspace and everything the run wrote into it."""
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
