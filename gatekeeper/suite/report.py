"""Reports of a suite run or a comparison: JSON for machines, Markdown and HTML for people.

The JSON is the stored result (`suite compare` reads it back); the Markdown is
short enough for a CI summary; the HTML is one self-contained file (inline CSS,
no scripts, nothing fetched).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gatekeeper.suite import by_criterion
from gatekeeper.suite.compare import SuiteComparison
from gatekeeper.suite.scenario import SuiteError
from gatekeeper.suite.verdict import SuiteResult

RESULTS_FILE = "results.json"
SUMMARY_FILE = "summary.md"
HTML_FILE = "report.html"
COMPARISON_FILE = "comparison.json"
COMPARISON_SUMMARY_FILE = "comparison.md"
COMPARISON_HTML_FILE = "comparison.html"

_CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:70em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;
text-align:left}th{background:#f3f3f3}.pass{color:#176c2c;font-weight:600}
.fail{color:#a4161a;font-weight:600}code{background:#f5f5f5;padding:0 .2em}"""


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def load_result(path: Path | str) -> SuiteResult:
    """Read a stored result: a `results.json`, or a directory holding one."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    try:
        return SuiteResult.model_validate_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SuiteError(f"{path}: cannot read: {exc.strerror}", file=str(path)) from None
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in err.get("loc", ())) or "(file)"
        raise SuiteError(f"{path}: not a suite result: {field}: {err.get('msg')}",
                         file=str(path), field=field) from None


def result_markdown(result: SuiteResult) -> str:
    """The run's summary in Markdown."""
    verdict = "PASSED" if result.passed else "FAILED"
    lines = [f"# Offline suite: {result.config} {verdict}", "",
             f"Suite `{result.suite}`, {result.completed_runs}/{result.planned_runs} runs, "
             f"eval mode {'on' if result.eval_mode else 'off'}"
             f"{', replayed' if result.replayed else ''}.", ""]
    if result.stopped:
        lines += [f"**Stopped early:** {result.stopped}", ""]
    lines += ["| scenario | runs | pass rate | forbidden rate | p95 steps | mean cost | verdict |",
              "|---|---:|---:|---:|---:|---:|---|"]
    for s in result.scenarios:
        g = s.gate
        lines.append(f"| {s.id} | {g['n']}/{s.planned} | {_pct(g['pass_rate'])} | "
                     f"{_pct(g['forbidden_rate'])} | {_num(g['p95_steps'])} | "
                     f"{_num(g['mean_cost_usd'])} | {g['verdict']} |")
    lines += ["", "## Pass rate per criterion", "", "| scenario | criterion | passed |",
              "|---|---|---:|"]
    for s in result.scenarios:
        for name, c in s.gate.get("criteria", {}).items():
            lines.append(f"| {s.id} | {name} | {c['passes']}/{c['n']} |")
    lines += ["", *by_criterion.rates_markdown([result])]
    if result.reasons:
        lines += ["", "## Why it failed", ""] + [f"- {r}" for r in result.reasons]
    if result.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in result.warnings]
    return "\n".join(lines) + "\n"


def comparison_markdown(comp: SuiteComparison) -> str:
    """The comparison's summary in Markdown."""
    p = comp.paired
    verdict = "may proceed" if comp.passed else "BLOCKED"
    lines = [f"# {comp.candidate} against {comp.baseline}: {verdict}", "",
             f"Paired runs: {p['pairs']}; pass->fail {p['flips']['pass_to_fail']}, "
             f"fail->pass {p['flips']['fail_to_pass']}; exact McNemar one-sided "
             f"p={p['mcnemar']['one_sided']:.4g}, two-sided p={p['mcnemar']['two_sided']:.4g}.",
             "", "Trajectory changes: " + ", ".join(f"{k} {v}" for k, v in
                                                    p["trajectory"].items()), "",
             "| resource | baseline | candidate | change |", "|---|---:|---:|---:|"]
    for name, r in comp.resources.items():
        change = "n/a" if r["change"] is None else f"{r['change']:+.0%}"
        lines.append(f"| {name} | {_num(r['baseline'])} | {_num(r['candidate'])} | {change} |")
    if comp.regressed:
        lines += ["", "## Regressed scenarios", ""]
        for s in comp.regressed:
            seeds = ", ".join(f"`{k}` <- `{v}`" for k, v in s["seed_files"].items())
            lines.append(f"- **{s['id']}** ({_pct(s['baseline_pass_rate'])} -> "
                         f"{_pct(s['candidate_pass_rate'])}); failed criteria "
                         f"{s['failed_criteria']}; task: {s['task']} Seeds: {seeds}")
    lines += ["", *by_criterion.comparison_markdown(comp.by_criterion)]
    if comp.judge is not None:
        j = comp.judge
        lines += ["", f"Judge: {j['judged']} judged, {j['errors']} errors, mean score_delta "
                      f"{_num(j['mean_score_delta'])} (floor {j['floor']:+.2f})."]
    if comp.blocking:
        lines += ["", "## Blocking", ""] + [f"- {b}" for b in comp.blocking]
    if comp.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in comp.warnings]
    return "\n".join(lines) + "\n"


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _html_page(title: str, passed: bool, sections: list[str]) -> str:
    cls = "pass" if passed else "fail"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{_CSS}</style></head><body><h1>{html.escape(title)} "
            f"<span class='{cls}'>{'PASSED' if passed else 'FAILED'}</span></h1>"
            + "".join(sections) + "</body></html>\n")


def _list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>"


def result_html(result: SuiteResult) -> str:
    """The run's report as one self-contained HTML page."""
    rows = [[s.id, f"{s.gate['n']}/{s.planned}", _pct(s.gate["pass_rate"]),
             _pct(s.gate["forbidden_rate"]), _num(s.gate["p95_steps"]), s.gate["verdict"]]
            for s in result.scenarios]
    runs = [[r.scenario, str(r.repeat), "pass" if r.passed else "fail",
             " ".join(r.tools), ", ".join(r.checks.get("failed", [])) or (r.error or ""),
             ", ".join(r.intercepted)] for r in result.runs]
    sections = [f"<p>Config <code>{html.escape(result.config)}</code>, suite "
                f"<code>{html.escape(result.suite)}</code>, {result.completed_runs}/"
                f"{result.planned_runs} runs.</p>",
                _html_table(["scenario", "runs", "pass rate", "forbidden rate", "p95 steps",
                             "verdict"], rows)]
    headers, rows = by_criterion.rates_rows({result.config: by_criterion.criterion_rates(result)})
    if rows:
        sections.append("<h2>By criterion</h2>" + _html_table(headers, rows))
    if result.stopped:
        sections.append(f"<p class='fail'>Stopped early: {html.escape(result.stopped)}</p>")
    if result.reasons:
        sections.append("<h2>Why it failed</h2>" + _list(result.reasons))
    if result.warnings:
        sections.append("<h2>Warnings</h2>" + _list(result.warnings))
    sections.append("<h2>Runs</h2>" + _html_table(
        ["scenario", "repeat", "result", "tools", "failed", "intercepted"], runs))
    return _html_page(f"Offline suite: {result.config}", result.passed, sections)


def comparison_html(comp: SuiteComparison) -> str:
    """The comparison as one self-contained HTML page."""
    p = comp.paired
    sections = [f"<p>{html.escape(comp.candidate)} against {html.escape(comp.baseline)}: "
                f"{p['pairs']} pairs, pass&rarr;fail {p['flips']['pass_to_fail']}, "
                f"fail&rarr;pass {p['flips']['fail_to_pass']}, McNemar one-sided "
                f"p={p['mcnemar']['one_sided']:.4g}.</p>",
                _html_table(["trajectory change", "pairs"],
                            [[k, str(v)] for k, v in p["trajectory"].items()]),
                _html_table(["resource", "baseline", "candidate", "change"],
                            [[k, _num(r["baseline"]), _num(r["candidate"]),
                              "n/a" if r["change"] is None else f"{r['change']:+.0%}"]
                             for k, r in comp.resources.items()])]
    if comp.regressed:
        sections.append("<h2>Regressed scenarios</h2>" + _html_table(
            ["scenario", "task", "seed files", "pass rate", "failed criteria"],
            [[s["id"], s["task"], json.dumps(s["seed_files"]),
              f"{_pct(s['baseline_pass_rate'])} -> {_pct(s['candidate_pass_rate'])}",
              json.dumps(s["failed_criteria"])] for s in comp.regressed]))
    headers, rows = by_criterion.rates_rows(by_criterion.section_tallies(comp.by_criterion))
    if rows:
        sections.append("<h2>By criterion</h2>" + _html_table(headers, rows))
    if comp.by_criterion.get("regressions"):
        sections.append("<h2>Regressions by criterion</h2>" + _list(
            [f"{r['key']}: {r['message']}" for r in comp.by_criterion["regressions"]]))
    if comp.blocking:
        sections.append("<h2>Blocking</h2>" + _list(comp.blocking))
    if comp.warnings:
        sections.append("<h2>Warnings</h2>" + _list(comp.warnings))
    return _html_page(f"{comp.candidate} against {comp.baseline}", comp.passed, sections)


def write_result(result: SuiteResult, out_dir: Path) -> dict[str, Path]:
    """Write results.json, summary.md and report.html into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {RESULTS_FILE: result.model_dump_json(indent=2), SUMMARY_FILE: result_markdown(result),
             HTML_FILE: result_html(result)}
    return _write(out_dir, files)


def write_comparison(comp: SuiteComparison, out_dir: Path) -> dict[str, Path]:
    """Write comparison.json, comparison.md and comparison.html into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {COMPARISON_FILE: json.dumps(comp.to_json(), indent=2, default=str),
             COMPARISON_SUMMARY_FILE: comparison_markdown(comp),
             COMPARISON_HTML_FILE: comparison_html(comp)}
    return _write(out_dir, files)


def _write(out_dir: Path, files: dict[str, str]) -> dict[str, Path]:
    written: dict[str, Path] = {}
    for name, text in files.items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written[name] = path
    return written


def as_json(value: Any) -> str:
    """Indented JSON with sorted keys."""
    return json.dumps(value, indent=2, sort_keys=True, default=str)
