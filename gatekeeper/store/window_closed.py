"""The cells of closed buckets, kept apart from the stage window so a gate view need not read them.

A stage window holds the concurrent comparison's cells (`window.CELL_N` and
`window.CELL_EVENTS` fields, one per 30 s bucket and stratum): at 1 job/s over
100,000 runs some 13,000 of its 16,000 fields, read and parsed by every gate
view for sections that change only as buckets close (`gatekeeper.view.kept`).

So a view that finds at least `MOVE_AT` cell fields of buckets closed a while
(below `cut`: `concurrent.closed_before(now) - 1`) in a window moves them, in
one script, into the window's closed-cells hash (`trace_keys.closed_key`: the
window key plus ":closed"), summed into it, and stamps that hash with a new
random id (`GEN`). Nothing else writes it, so an id names its contents: readers
read the window, its pending increments and the closed-cells id in one atomic
step, and take the closed cells from the copy they kept under that id
(`ClosedCells`, one per window per process), reading the hash whole only when
the id is new to them. The window is the sum of both hashes and the pending
list, for every reader (`READ_SCRIPT` answers both); a late run in a bucket
already moved lands in the window hash as any run does and is summed the same way.

The closed-cells hash lives exactly as long as its window: the script gives it
the window's TTL, and ingest refreshes both together (`trace_ingest`). A failed
move (Redis refusing writes: maxmemory, a read-only replica) changes nothing and
the view goes on; the next one tries again. (Not the role archive of
`DELETE /v1/bindings/<role>`: nothing here is archived, only kept apart.)
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.window import CELL_EVENTS, CELL_N


def _moving(variable: str) -> bool:
    """ROLEGATE_MOVE_CLOSED_CELLS: 1 (the default) moves closed cells, 0 only reads them."""
    raw = os.environ.get(variable, "").strip()
    if raw not in ("", "0", "1"):
        raise ValueError(f"{variable} must be 0 or 1, got {raw!r}")
    return raw != "0"


#: Whether views move closed cells (ROLEGATE_MOVE_CLOSED_CELLS=0: they only read
#: them). Every reader of this release sums the closed-cells hash whatever this says;
#: a release before it reads the window hash alone, so during a rolling upgrade
#: from one (both running at once) set 0 on the new routers until no old router or
#: gatekeeper is left, then unset it (docs/maintenance.md).
MOVE_CLOSED = _moving("ROLEGATE_MOVE_CLOSED_CELLS")
#: The window fields moved: the cells' counters ("cn:", "cf:", "ce:", "cx:").
MOVED = (CELL_N, *CELL_EVENTS.values())
#: The closed-cells hash's field holding its id (no window field starts with "~").
GEN = "~gen"
#: Movable cell fields in a window before a view moves them (at 1 job/s some 80
#: minutes of buckets; a view then reads a few hundred cell fields, not 13,000).
MOVE_AT = 512
#: Most fields one script moves: bounds how long it blocks Redis (about 4 us a field,
#: so some 8 ms: a 100,000-run window at 1 job/s, 13,000 cells, is moved over its
#: first 7 views; later moves are of MOVE_AT-odd fields, about 2 ms).
MOVE_AT_MOST = 2_000

# KEYS: the window hash, its closed-cells hash. ARGV: the new id, then the names of the
# window fields to move (cells of buckets below the cut; the reader chose them). Moves
# each one still in the window into the closed-cells hash (summed: its value as it is
# now, so runs stored since the reader's read move too), stamps that hash with the new
# id when it moved any, gives it the window's TTL. Returns the fields moved.
MOVE_SCRIPT = """
local moved = 0
for i = 2, #ARGV do
  local value = redis.call('HGET', KEYS[1], ARGV[i])
  if value then
    redis.call('HINCRBY', KEYS[2], ARGV[i], value)
    redis.call('HDEL', KEYS[1], ARGV[i])
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call('HSET', KEYS[2], '~gen', ARGV[1])
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) else redis.call('PERSIST', KEYS[2]) end
end
return moved
"""


@dataclass(frozen=True)
class ClosedCells:
    """A closed-cells hash's id and cells: {prefix less its colon: {"<bucket>:<stratum>": n}}.

    Read-only: kept per window by every reader that read it, and shared by its views.
    """

    gen: str
    groups: Mapping[str, Mapping[str, int]]

    @classmethod
    def of_hash(cls, raw: Mapping[Any, Any]) -> ClosedCells | None:
        """The cells of a closed-cells hash's HGETALL answer (bytes or str); None when empty."""
        groups: dict[str, dict[str, int]] = {prefix[:-1]: {} for prefix in MOVED}
        gen = ""
        for key, value in raw.items():
            name = key.decode() if isinstance(key, bytes) else key
            if name == GEN:
                gen = value.decode() if isinstance(value, bytes) else value
                continue
            head, _, rest = name.partition(":")
            groups.setdefault(head, {})[rest] = int(value)
        # Never without an id (the script stamps every move); if so, a fresh one: kept nowhere.
        return cls(gen or new_gen(), groups) if raw else None

    def fields(self) -> dict[str, int]:
        """The moved counts as window fields."""
        return {f"{head}:{rest}": n for head, group in self.groups.items()
                for rest, n in group.items()}


def movable(groups: Mapping[str, Mapping[str, int]], cut: int) -> list[str]:
    """The window fields of the cells in `groups` (`WindowStats.cell_parts`: by prefix)
    of buckets below `cut`."""
    return [prefix + cell for prefix, group in groups.items() for cell in group
            if int(cell.partition(":")[0]) < cut]


def new_gen() -> str:
    """A fresh closed-cells id: random, so no two moves (any process, any time) share one."""
    return uuid.uuid4().hex
