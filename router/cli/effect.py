"""`rolegate status`'s effect lines: candidate - current per metric, and the unit test.

From the gate view's `difference` (an always-valid interval per metric,
`gatekeeper.view.difference`) and `units` (`gatekeeper.view.units`) sections.
"""

from __future__ import annotations

from typing import Any


def effect_lines(view: dict[str, Any]) -> list[str]:
    """candidate - current per metric with its always-valid interval, and the unit test."""
    lines: list[str] = []
    for metric in view.get("difference") or ():
        if metric.get("lower") is None:
            continue
        lines.append(f"  {'effect' if not lines else '':<10} {metric['metric']} "
                     f"{metric['estimate']:+.4g} [{metric['lower']:+.4g}, {metric['upper']:+.4g}] "
                     f"({metric['confidence']:.0%}, valid at every look)")
    test = (view.get("units") or {}).get("test")
    if test:
        repeats = f"; keys repeat ({test['repeats_why']})" if test.get("repeats") else ""
        lines.append(f"  {'unit test':<10} e^{test['log_e']:.2f} of e^{test['threshold']:.2f} "
                     f"to roll back{repeats}")
    return lines
