"""Criteria, feedback and golden sets from the command line, through the HTTP API.

    rolegate criteria generate ROLE [--config CFG] [--spec FILE]   generate and store criteria
    rolegate criteria diff A B                                     criteria added/removed/changed
    rolegate feedback RUN_ID --tier T [--correction JSON]          record a reviewer's word
    rolegate golden build ROLE --out SUITE_DIR                     write an offline suite

Exit codes: see `router.cli.common` (0 done, 1 refused, 2 usage or connection).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import click
from pydantic import ValidationError

from gatekeeper.checks.criteria import Criterion
from gatekeeper.checks.criteria import generate as generate_criteria
from gatekeeper.checks.golden import SAMPLE_TIERS, Case, to_scenario
from gatekeeper.checks.spec import Spec
from gatekeeper.suite.scenario import Scenario
from rolegate.http import ApiClient, ApiError
from rolegate.trace import Trace
from router.cli.common import EXIT_REFUSED, EXIT_USAGE, api_command, echo_json

GOLDEN_PREFIX = "golden-"


def _q(segment: str) -> str:
    return quote(segment, safe="")


def _criteria_lines(criteria: list[dict[str, Any]]) -> list[str]:
    rows = [("KEY", "CHECK", "DESCRIPTION")]
    rows += [(c["key"], "judge" if c["kind"] == "judge" else "deterministic", c["description"])
             for c in criteria]
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    return [f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2]}" for r in rows]


def _diff_lines(diff: dict[str, Any]) -> list[str]:
    lines = [diff["summary"]]
    for label, sign in (("added", "+"), ("removed", "-")):
        lines += [f"  {sign} {c['key']}: {c['description']}" for c in diff[label]]
    for change in diff["changed"]:
        lines.append(f"  ~ {change['key']}: {change['before']['params']} -> "
                     f"{change['after']['params']}")
    lines += [f"  = {c['key']} reworded: {c['after']['description']}" for c in diff["reworded"]]
    return lines


@click.group()
def criteria() -> None:
    """Scoreable criteria generated from a config's spec."""


@criteria.command("generate")
@click.argument("role")
@click.option("--config", "config", default=None,
              help="Config whose spec to read (default: the role's candidate, else current).")
@click.option("--spec", "spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Register this spec (JSON) for the config first.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
@api_command
def generate(api: ApiClient, role: str, config: str | None, spec_file: Path | None,
             as_json: bool) -> None:
    """Generate and store CONFIG's criteria; show what they change against ROLE's current config."""
    binding = api.get(f"/v1/bindings/{_q(role)}")["binding"]
    config = config or binding.get("candidate") or binding["current"]
    if spec_file is not None:
        try:
            spec = json.loads(spec_file.read_text(encoding="utf-8"))
        except ValueError as exc:
            click.echo(f"error: {spec_file}: not valid JSON: {exc}", err=True)
            sys.exit(EXIT_USAGE)
        body = spec if isinstance(spec, dict) and "spec" in spec else {"spec": spec}
        api.put(f"/v1/configs/{_q(config)}", body)
    else:
        record = api.get(f"/v1/configs/{_q(config)}")
        fresh = [c.model_dump(mode="json") for c in generate_criteria(Spec.model_validate(
            record["spec"]))]
        if fresh != record["criteria"]:
            # Stored by an older generator: store what this one makes of the same spec.
            api.put(f"/v1/configs/{_q(config)}", {"spec": record["spec"],
                                                   "description": record["description"]},
                    version=record["version"])
    stored = api.get(f"/v1/configs/{_q(config)}/criteria")
    diff = None
    if binding["current"] != config:
        try:
            diff = api.get(f"/v1/configs/{_q(binding['current'])}/criteria/diff/{_q(config)}")
        except ApiError as exc:
            if exc.status != 404:  # only a current config without a spec is tolerated
                raise
    if as_json:
        echo_json({**stored, "diff_from_current": diff})
        return
    click.echo(f"{config}: {len(stored['criteria'])} criteria (version {stored['version']})")
    for line in _criteria_lines(stored["criteria"]):
        click.echo(line)
    if diff is not None:
        click.echo(f"against {binding['current']} (current of {role}):")
        for line in _diff_lines(diff):
            click.echo(line)


@criteria.command("diff")
@click.argument("old")
@click.argument("new")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")
@api_command
def diff_command(api: ApiClient, old: str, new: str, as_json: bool) -> None:
    """Criteria added, removed, changed and reworded going from config OLD to NEW."""
    diff = api.get(f"/v1/configs/{_q(old)}/criteria/diff/{_q(new)}")
    if as_json:
        echo_json(diff)
        return
    for line in _diff_lines(diff):
        click.echo(line)


@click.command("feedback")
@click.argument("run_id")
@click.option("--tier", required=True, type=click.Choice(
    ["negative_corrected", "negative", "positive", "reprocessed", "reviewed"]))
@click.option("--correction", default=None, help="The corrected result (JSON, else text).")
@click.option("--reviewer", default=None, help="Who reviewed (default: the token's name).")
@click.option("--note", default="", help="Free text kept with the entry.")
@click.option("--role", default=None, help="The run's role (found by run id when left out).")
@api_command
def feedback(api: ApiClient, run_id: str, tier: str, correction: str | None,
             reviewer: str | None, note: str, role: str | None) -> None:
    """Record a reviewer's feedback tier (and correction) on a production run."""
    body: dict[str, Any] = {"tier": tier, "note": note}
    if correction is not None:
        try:
            body["correction"] = json.loads(correction)
        except ValueError:
            body["correction"] = correction
    if reviewer:
        body["reviewer"] = reviewer
    if role:
        body["role"] = role
    answer = api.post(f"/v1/traces/{_q(run_id)}/feedback", body)
    flagged = f" (flagged: {answer['flagged']})" if answer["flagged"] else ""
    click.echo(f"{run_id}: {len(answer['feedback'])} entries, tier {answer['tier']}{flagged}")


@click.group()
def golden() -> None:
    """Golden sets: reviewed production cases as an offline suite."""


def _parse_quota(values: tuple[str, ...]) -> list[str]:
    out = []
    for raw in values:
        tier, sep, count = raw.partition("=")
        if not sep or tier not in SAMPLE_TIERS or not count.isdigit():
            raise click.BadParameter(f"expected TIER=N with TIER one of {', '.join(SAMPLE_TIERS)}",
                                     param_hint="--quota")
        out.append(f"{tier}:{count}")
    return out


def _prepare(out: Path, force: bool) -> None:
    """Make `out` ready: refuse to mix with existing scenarios unless --force."""
    scenarios = out / "scenarios"
    existing = sorted(scenarios.glob("*.json")) if scenarios.is_dir() else []
    if existing and not force:
        click.echo(f"error: {scenarios} already holds {len(existing)} scenarios; "
                   "pass --force to replace the golden ones", err=True)
        sys.exit(EXIT_REFUSED)
    for path in existing:
        if path.name.startswith(GOLDEN_PREFIX):
            path.unlink()
    seeds = out / "seed"
    if seeds.is_dir():
        for path in seeds.glob(f"{GOLDEN_PREFIX}*"):
            shutil.rmtree(path)
    scenarios.mkdir(parents=True, exist_ok=True)


def write_suite(sample: dict[str, Any], out: Path, *, repeats: int) -> dict[str, Any]:
    """Write the sampled cases as a suite under `out`; return the manifest written."""
    written, flagged = [], list(sample["flagged"])
    for item in sample["cases"]:
        case = Case(trace=Trace.model_validate(item["trace"]), tier=item["tier"],
                    reference=item["reference"], reference_source=item["reference_source"])
        scenario, seeds = to_scenario(case, sample["invariants"], repeats=repeats)
        try:
            Scenario.model_validate(scenario)
        except ValidationError as exc:
            # The input cannot be rebuilt safely (e.g. a seed path outside the workspace).
            flagged.append({"run_id": case.trace.run_id, "reason": f"not rebuildable: {exc}",
                            "feedback": item["feedback"]})
            continue
        for source, content in seeds.items():
            target = out / source
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        path = out / "scenarios" / f"{scenario['id']}.json"
        path.write_text(json.dumps(scenario, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        written.append({"scenario": scenario["id"], "run_id": case.trace.run_id,
                        "tier": case.tier, "reference_source": case.reference_source,
                        "input": case.trace.input})
    manifest = {"role": sample["role"], "config": sample["config"],
                "policy_since": sample["policy_since"], "built_at": sample["now"],
                "tiers": sample["tiers"], "excluded": sample["excluded"],
                "cases": written, "flagged": flagged}
    (out / "golden.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n",
                                     encoding="utf-8")
    criteria_list = [Criterion.model_validate(c).model_dump(mode="json")
                     for c in sample["criteria"]]
    (out / "criteria.json").write_text(json.dumps({"config": sample["config"],
                                                   "criteria": criteria_list}, indent=2) + "\n",
                                       encoding="utf-8")
    review = ["# Cases for a human", "",
              "These cases were left out of the golden set: their feedback is ambiguous or",
              "conflicting, or they cannot be rebuilt. Settle them, then build again.", ""]
    review += [f"- `{f['run_id']}`: {f['reason']}" for f in flagged] or ["(none)"]
    (out / "REVIEW.md").write_text("\n".join(review) + "\n", encoding="utf-8")
    return manifest


@golden.command("build")
@click.argument("role")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Suite directory to write.")
@click.option("--quota", multiple=True, help="TIER=N, repeatable (e.g. negative_corrected=60).")
@click.option("--min-age", type=float, default=None,
              help="Seconds before an unreviewed case counts as accepted (default 2 days).")
@click.option("--window", type=float, default=None, help="Seconds of history (default 30 days).")
@click.option("--seed", default="golden", show_default=True, help="Sampling seed.")
@click.option("--repeats", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--force", is_flag=True, help="Replace golden scenarios already in --out.")
@click.option("--tools", "tools_file", default=None,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Tool catalog (tools.json) to copy into the suite.")
@api_command
def build(api: ApiClient, role: str, out: Path, quota: tuple[str, ...], min_age: float | None,
          window: float | None, seed: str, repeats: int, force: bool,
          tools_file: Path | None) -> None:
    """Sample ROLE's recent, policy-current cases by feedback tier and write them as a suite."""
    params: list[tuple[str, str]] = [("quota", q) for q in _parse_quota(quota)]
    params.append(("seed", seed))
    if min_age is not None:
        params.append(("min_age", repr(min_age)))
    if window is not None:
        params.append(("window", repr(window)))
    sample = api.get(f"/v1/roles/{_q(role)}/golden?{urlencode(params)}")
    _prepare(out, force)
    manifest = write_suite(sample, out, repeats=repeats)
    if tools_file is not None:
        shutil.copyfile(tools_file, out / "tools.json")
    click.echo(f"{role} ({sample['config']}): {len(manifest['cases'])} scenarios in {out}")
    for tier in SAMPLE_TIERS:
        t = sample["tiers"][tier]
        click.echo(f"  {tier:<19} {t['taken']:>4} of {t['available']:>5} (quota {t['quota']})")
    left_out = ", ".join(f"{k} {v}" for k, v in sample["excluded"].items() if v)
    click.echo(f"  left out: {left_out or 'none'}")
    if manifest["flagged"]:
        click.echo(f"  {len(manifest['flagged'])} cases need a human: see {out / 'REVIEW.md'}")
    if not manifest["cases"]:
        click.echo("error: no eligible cases; nothing to evaluate", err=True)
        sys.exit(EXIT_REFUSED)


def register(main: click.Group) -> None:
    """Add the criteria, feedback and golden commands to the `rolegate` group."""
    main.add_command(criteria)
    main.add_command(feedback)
    main.add_command(golden)
