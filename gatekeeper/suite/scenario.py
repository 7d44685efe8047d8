"""Scenarios and suites: a frozen initial environment, a task, and the invariants to hold.

A suite is a directory kept under version control like code::

    SUITE/
      scenarios/*.json   one Scenario per file
      seed/...           the files the scenarios' `seed_files` point at
      tools.json         optional: the tool catalog (schemas, side effects, credentials)

A bad file is refused with its name and the offending field, before any run.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bindings.errors import InvalidInput
from bindings.models import Invariants
from rolegate.body import AgentBody, CompletionBody, parse_body
from rolegate.config_ids import config_id_problem

SCENARIO_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
#: Repeats are budgeted by the weight of the change: 5 for safety, 3 for a wording tweak.
WEIGHT_REPEATS = {"minor": 3, "safety": 5}
SAFETY_TAG = "safety"


class SuiteError(InvalidInput):
    """A suite, scenario, tool catalog or config file is unusable; details name file and field."""

    code = "bad_suite"


def _relative_path(value: str) -> str:
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts or "\\" in value:
        raise ValueError(f"{value!r} must be a relative path without '..'")
    return value


class Scenario(BaseModel):
    """One scenario: initial environment plus task plus invariants."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    #: Workspace path -> file inside the suite directory.
    seed_files: dict[str, str] = Field(default_factory=dict)
    task: str = Field(min_length=1, max_length=20000)
    invariants: Invariants = Field(default_factory=Invariants)
    repeats: int = Field(5, ge=1, le=1000)
    #: Ground truth for the pairwise judge; never used by the deterministic checks.
    expected: str | None = None
    tags: tuple[str, ...] = ()

    @field_validator("id")
    @classmethod
    def _id_usable(cls, value: str) -> str:
        if not SCENARIO_ID_PATTERN.fullmatch(value):
            raise ValueError("must be 1-128 letters, digits, '_', '.', '-' (it names files)")
        return value

    @field_validator("seed_files")
    @classmethod
    def _paths_relative(cls, value: dict[str, str]) -> dict[str, str]:
        for target, source in value.items():
            _relative_path(target)
            _relative_path(source)
        return value

    @property
    def safety(self) -> bool:
        """Whether a judged regression on this scenario blocks outright."""
        return SAFETY_TAG in self.tags


class ToolSpec(BaseModel):
    """One tool the agent may call through the proxy.

    kind: `workspace` tools (read_file, write_file, list_files) act on the run's
    workspace; `static` tools answer `result`; `http` tools POST their arguments to
    `url` (the live tool). `side_effecting` tools are never executed in eval mode.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["workspace", "static", "http"] = "static"
    description: str = ""
    #: A JSON-schema-like object for the arguments: `required` and `properties` are checked.
    parameters: dict[str, Any] = Field(default_factory=dict)
    side_effecting: bool = False
    result: Any = None
    url: str | None = None
    #: The catalog credential this tool sends as a bearer token.
    credential: str | None = None
    #: What eval mode answers instead of executing a side-effecting tool.
    synthesized: Any = Field(default_factory=lambda: {"ok": True})

    def schema_hash(self, name: str) -> str:
        """A short hash of what the agent can rely on: name, parameters, side effects."""
        canonical = json.dumps({"name": name, "parameters": self.parameters,
                                "side_effecting": self.side_effecting}, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class ToolCatalog(BaseModel):
    """The suite's tools and the credentials they would use in production."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tools: dict[str, ToolSpec] = Field(default_factory=dict)
    #: Credential name -> the environment variable holding the real secret.
    credentials: dict[str, str] = Field(default_factory=dict)

    def schema_hashes(self) -> dict[str, str]:
        """Each tool's schema hash, by name."""
        return {name: spec.schema_hash(name) for name, spec in sorted(self.tools.items())}

    def catalog_hash(self) -> str:
        """One hash over every tool schema: the trace's `tool_schema_hash` stamp."""
        text = json.dumps(self.schema_hashes(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Suite:
    """A loaded suite: its directory, its scenarios (sorted by id) and its tools."""

    root: Path
    scenarios: tuple[Scenario, ...]
    tools: ToolCatalog

    def seed_source(self, scenario: Scenario, target: str) -> Path:
        """The suite file that seeds `target` in `scenario`'s workspace (inside the suite)."""
        source = scenario.seed_files[target]
        problem = seed_problem(self.root, source)
        if problem is not None:
            raise SuiteError(f"{scenario.id}: seed_files.{target}: {problem}",
                             field=f"seed_files.{target}")
        return self.root / source


def seed_problem(root: Path, source: str) -> str | None:
    """Why seed file `source` is not a file inside `root` once links are resolved, or None.

    A symlink in the suite (`seed/notes.txt -> /etc/passwd`) would otherwise copy
    whatever it points at into every run's workspace, and from there into
    results.json: the suite directory is the boundary, whatever its links say.
    """
    resolved = (root / source).resolve()
    if not resolved.is_relative_to(root.resolve()):
        return (f"seed file {source!r} resolves to {str(resolved)!r}, outside the suite "
                f"directory {str(root)!r} (a symbolic link?); seed files must stay inside it")
    if not resolved.is_file():
        return f"seed file {source!r} not found in {root}"
    return None


@dataclass(frozen=True)
class AgentConfig:
    """The config under test: its name (stamped on traces) and its JSON content."""

    name: str
    data: dict[str, Any]
    path: Path

    @property
    def content_hash(self) -> str:
        """A short hash of the config's content: the trace's `instruction_hash` stamp."""
        text = json.dumps(self.data, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def body(self) -> AgentBody | CompletionBody | None:
        """The config's `body` (model, instructions, tools; or messages), if it has one."""
        raw = self.data.get("body")
        return parse_body(raw) if raw is not None else None


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors(include_url=False)[0]
    field = ".".join(str(part) for part in err.get("loc", ())) or "(file)"
    return field, err.get("msg", "invalid")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read: {exc.strerror}", file=str(path)) from None
    except ValueError as exc:
        raise SuiteError(f"{path}: not valid JSON: {exc}", file=str(path), field="(file)") from None


def load_scenario(path: Path, root: Path | None = None) -> Scenario:
    """Load one scenario file; SuiteError names the file and the field on any problem."""
    data = _read_json(path)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        field, message = _first_error(exc)
        raise SuiteError(f"{path}: {field}: {message}", file=str(path), field=field) from None
    if root is not None:
        for target, source in scenario.seed_files.items():
            problem = seed_problem(root, source)
            if problem is not None:
                field = f"seed_files.{target}"
                raise SuiteError(f"{path}: {field}: {problem}", file=str(path), field=field)
    return scenario


def load_tools(path: Path) -> ToolCatalog:
    """Load a tool catalog file; an absent file is an empty catalog."""
    if not path.exists():
        return ToolCatalog()
    try:
        return ToolCatalog.model_validate(_read_json(path))
    except ValidationError as exc:
        field, message = _first_error(exc)
        raise SuiteError(f"{path}: {field}: {message}", file=str(path), field=field) from None


def load_suite(root: Path | str) -> Suite:
    """Load a suite directory: every `scenarios/*.json`, checked, with unique ids."""
    root = Path(root)
    folder = root / "scenarios"
    if not folder.is_dir():
        raise SuiteError(f"{root}: no scenarios/ directory", file=str(root))
    scenarios: dict[str, Scenario] = {}
    for path in sorted(folder.glob("*.json")):
        scenario = load_scenario(path, root)
        if scenario.id in scenarios:
            raise SuiteError(f"{path}: id: {scenario.id!r} is used by another scenario",
                             file=str(path), field="id")
        scenarios[scenario.id] = scenario
    if not scenarios:
        raise SuiteError(f"{folder}: no scenario files (*.json)", file=str(folder))
    ordered = tuple(scenarios[key] for key in sorted(scenarios))
    return Suite(root=root, scenarios=ordered, tools=load_tools(root / "tools.json"))


def load_config(path: Path | str) -> AgentConfig:
    """Load the config under test: a JSON object; its `name` (else the file stem) names it."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, dict):
        raise SuiteError(f"{path}: a config must be a JSON object", file=str(path),
                         field="(file)")
    name = data.get("name", path.stem)
    # The config id rule of bindings and traces (rolegate.config_ids): the name is
    # stamped on every trace and the verdict is posted for it, so any id a binding
    # takes (`summarizer@2026-10-02`) must be a name here too.
    problem = (config_id_problem(name) if isinstance(name, str)
               else f"must be a string, not {type(name).__name__}")
    if problem is not None:
        raise SuiteError(f"{path}: name: {problem}", file=str(path), field="name")
    if data.get("body") is not None:
        try:
            parse_body(data["body"])
        except ValueError as exc:  # pydantic's ValidationError is one
            field, message = (_first_error(exc) if isinstance(exc, ValidationError)
                              else ("", str(exc)))
            raise SuiteError(f"{path}: body.{field}: {message}", file=str(path),
                             field=f"body.{field}") from None
    return AgentConfig(name=name, data=data, path=path)


def repeats_for(scenario: Scenario, repeats: int | None = None,
                weight: str | None = None) -> int:
    """How many times to run `scenario`: --repeats wins, then --weight, then the file."""
    if repeats is not None:
        return repeats
    if weight is not None:
        return WEIGHT_REPEATS[weight]
    return scenario.repeats
