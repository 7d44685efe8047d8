"""Is anyone judging? The gatekeepers' heartbeats, summed up for every surface. Pure.

Every gatekeeper process posts a heartbeat after each tick (`POST
/v1/gatekeeper/heartbeat`): who it is, whether it leads, its interval, how many
roles it judged and which errors it met. The router stamps each one with Redis's
clock, so a gatekeeper whose own clock is off cannot make itself look alive.

`summarize()` turns the stored heartbeats into what the dashboard, `rolegate
status`, `/healthz` and `/metrics` show:

- `ok`: a leading gatekeeper (not a dry run) ticked within `late_after_s`,
  LATE_INTERVALS of its own interval (at least MIN_LATE_S);
- `late`: the last leading tick is older than that: nothing is promoting or
  rolling back;
- `absent`: no gatekeeper has ever ticked as leader (or not within KEEP_S).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

OK, LATE, ABSENT = "ok", "late", "absent"

#: A leader is late after this many of its intervals without a tick...
LATE_INTERVALS = 3
#: ...and never sooner than this, whatever its interval.
MIN_LATE_S = 10.0
#: Heartbeats older than this are forgotten (a holder that went away for good).
KEEP_S = 86_400.0
#: At most this many errors are kept from one tick.
MAX_ERRORS = 20


def late_after(interval_s: float | None) -> float:
    """Seconds without a leading tick after which the gatekeeper counts as late."""
    return max(MIN_LATE_S, LATE_INTERVALS * (interval_s or 0.0))


def summarize(entries: Iterable[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """The heartbeat summary at `now` (Redis's clock) from every stored heartbeat."""
    beats = [dict(e) for e in entries if now - float(e.get("time", 0.0)) <= KEEP_S]
    leading = [b for b in beats if b.get("leader") and not b.get("dry_run")]
    last = max(leading, key=lambda b: float(b["time"]), default=None)
    holders: list[dict[str, Any]] = sorted(
        ({"holder": b.get("holder"), "leader": bool(b.get("leader")),
          "dry_run": bool(b.get("dry_run")),
          "age_s": round(max(0.0, now - float(b["time"])), 3)} for b in beats),
        key=lambda h: float(h["age_s"]))
    if last is None:
        return {"status": ABSENT, "leader": None, "last_tick": None, "age_s": None,
                "interval_s": None, "late_after_s": late_after(None), "roles_judged": None,
                "errors": [], "holders": holders,
                "text": "no gatekeeper is running: nothing is promoted or rolled back "
                        "until one ticks (`rolegate gatekeeper`)"}
    age = max(0.0, now - float(last["time"]))
    interval = float(last.get("interval_s") or 0.0) or None
    limit = late_after(interval)
    status = OK if age <= limit else LATE
    errors = list(last.get("errors") or [])[:MAX_ERRORS]
    summary = {"status": status, "leader": last.get("holder"), "last_tick": float(last["time"]),
               "age_s": round(age, 3), "interval_s": interval, "late_after_s": limit,
               "roles_judged": last.get("roles_judged"), "errors": errors, "holders": holders}
    summary["text"] = describe(summary)
    return summary


def describe(summary: Mapping[str, Any]) -> str:
    """One sentence for people: who leads and when it last ticked, or that nobody does."""
    if summary["status"] == ABSENT:
        return str(summary.get("text") or "no gatekeeper is running")
    age = _age(float(summary["age_s"]))
    if summary["status"] == LATE:
        return (f"no gatekeeper has ticked for {age} (last: {summary['leader']}): nothing is "
                f"promoted or rolled back until one does")
    errors = summary.get("errors") or []
    tail = f", {len(errors)} error(s): {errors[0]}" if errors else ", no errors"
    return (f"gatekeeper {summary['leader']} leads; last tick {age} ago, "
            f"{summary.get('roles_judged')} role(s) judged{tail}")


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.0f} days"
