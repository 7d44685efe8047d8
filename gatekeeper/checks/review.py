"""Review by criterion: pass rates per criterion key, and regressions named by criterion.

Pure. A policy problem shows as one criterion losing cases ("12 cases lost the
verifyIdentity call"), not as a dip in an average. Verdicts are the
`{criterion key: True | False | None}` maps `criteria.evaluate` returns; None
(not applicable, or left to the judge) counts neither way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gatekeeper.checks.criteria import Criterion
from gatekeeper.stats.statistics import wilson_interval

Verdicts = Mapping[str, "bool | None"]


@dataclass(frozen=True)
class Tally:
    """One criterion over many cases: passed, failed, not applicable."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0

    @property
    def n(self) -> int:
        """Cases that were scored either way."""
        return self.passed + self.failed

    @property
    def rate(self) -> float | None:
        """Pass rate over the scored cases, None when none was scored."""
        return self.passed / self.n if self.n else None

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: counts, rate and its 95% Wilson interval."""
        low, high = wilson_interval(self.passed, self.n) if self.n else (None, None)
        return {"passed": self.passed, "failed": self.failed, "skipped": self.skipped,
                "n": self.n, "rate": self.rate, "low": low, "high": high}


def tally(cases: Iterable[Verdicts]) -> dict[str, Tally]:
    """Per criterion key, how many cases passed, failed, or were not scored."""
    counts: dict[str, list[int]] = {}
    for verdicts in cases:
        for key, verdict in verdicts.items():
            slot = counts.setdefault(key, [0, 0, 0])
            slot[0 if verdict is True else 1 if verdict is False else 2] += 1
    return {key: Tally(*slot) for key, slot in sorted(counts.items())}


@dataclass(frozen=True)
class Regression:
    """One criterion the candidate lost on paired cases the baseline passed."""

    key: str
    lost: int
    gained: int
    cases: tuple[str, ...]
    message: str

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {"key": self.key, "lost": self.lost, "gained": self.gained,
                "cases": list(self.cases), "message": self.message}


def regressions(
    baseline: Mapping[str, Verdicts],
    candidate: Mapping[str, Verdicts],
    criteria: Iterable[Criterion] = (),
) -> list[Regression]:
    """Criteria the candidate fails on cases the baseline passed, worst first.

    Cases are paired by id (e.g. "scenario#repeat"); a criterion counts as lost on
    a case when the baseline passed it and the candidate failed it. Criteria with
    more losses than gains are listed.
    """
    known = {c.key: c for c in criteria}
    lost: dict[str, list[str]] = {}
    gained: dict[str, int] = {}
    for case in sorted(baseline.keys() & candidate.keys()):
        before, after = baseline[case], candidate[case]
        for key in before.keys() & after.keys():
            if before[key] is True and after[key] is False:
                lost.setdefault(key, []).append(case)
            elif before[key] is False and after[key] is True:
                gained[key] = gained.get(key, 0) + 1
    out = [
        Regression(key=key, lost=len(cases), gained=gained.get(key, 0), cases=tuple(cases),
                   message=describe_loss(key, len(cases), known.get(key)))
        for key, cases in lost.items() if len(cases) > gained.get(key, 0)
    ]
    return sorted(out, key=lambda r: (-(r.lost - r.gained), r.key))


def paired_flips(baseline: Mapping[str, Verdicts],
                 candidate: Mapping[str, Verdicts]) -> dict[str, tuple[int, int]]:
    """Per criterion key over cases both sides scored: (lost, gained).

    Lost: the baseline passed and the candidate failed; gained: the reverse. A key
    scored on some paired case with neither is listed at (0, 0).
    """
    out: dict[str, list[int]] = {}
    for case in baseline.keys() & candidate.keys():
        before, after = baseline[case], candidate[case]
        for key in before.keys() & after.keys():
            b, a = before[key], after[key]
            if b is None or a is None:
                continue
            slot = out.setdefault(key, [0, 0])
            if b and not a:
                slot[0] += 1
            elif a and not b:
                slot[1] += 1
    return {key: (lost, gained) for key, (lost, gained) in sorted(out.items())}


def describe_loss(key: str, count: int, criterion: Criterion | None = None) -> str:
    """A one-line human reading of a loss: "12 cases lost the verifyIdentity call"."""
    # Readers show the key beside the message, so the message names the behaviour.
    cases = f"{count} case{'s' if count != 1 else ''}"
    if criterion is not None:
        tool = criterion.params.get("tool")
        if criterion.kind == "required_tool" or (criterion.kind == "escalation" and tool):
            return f"{cases} lost the {tool} call"
        if criterion.kind == "output_field":
            return f"{cases} lost output field {'.'.join(criterion.params['path'])}"
        return f"{cases} now fail: {criterion.description}"
    if key.startswith("tool:"):
        return f"{cases} lost the {key.removeprefix('tool:')} call"
    return f"{cases} now fail {key}"


def rates_table(by_config: Mapping[str, Mapping[str, Tally]],
                descriptions: Mapping[str, str] | None = None) -> list[str]:
    """A Markdown table: one row per criterion key, one pass-rate column per config."""
    configs = list(by_config)
    keys = sorted({key for tallies in by_config.values() for key in tallies})
    if not keys:
        return []
    lines = ["| criterion | " + " | ".join(configs) + " |",
             "|---|" + "---|" * len(configs)]
    for key in keys:
        cells = []
        for config in configs:
            t = by_config[config].get(key)
            cells.append("–" if t is None or t.rate is None
                         else f"{t.rate:.0%} ({t.passed}/{t.n})")
        label = f"`{key}`"
        if descriptions and key in descriptions:
            label += f" {descriptions[key]}"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines
