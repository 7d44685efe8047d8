"""`rolegate status`'s line on runs matched to their own reports by run id.

From the gate view's `reports.runs` (`gatekeeper.view.reports.with_runs`):
per arm, the runs with ids past the grace, matched and missing, and those in flight.
"""

from __future__ import annotations

from typing import Any


def matched_lines(reports: dict[str, Any]) -> list[str]:
    """Per arm, the runs with ids matched to their own reports, missing and in flight."""
    runs = reports.get("runs") or {}
    words = [f"{arm} {f['matched']} of {f['with_id']} matched, {f['missing']} missing, "
             f"{f['in_flight']} in flight"
             for arm, f in ((reports.get("arm") if key == "candidate" else key, runs.get(key))
                            for key in ("candidate", "current"))
             if f and (f.get("with_id") or f.get("in_flight"))]
    return [f"{'':13}by run id: " + "; ".join(words)] if words else []
