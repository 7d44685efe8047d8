"""A stage window's pending increments: appended by ingest, folded by ingest, summed by readers.

Ingest does not add a trace's increments to the window hash field by field:
that was about 30 HINCRBY calls per trace (the window, the reporter's own
window, the tally), some 18 us of the ingest script's 29 us, on the one
thread every resolve's refresh also waits on. It appends one entry, the
group's summed increments and its reporter, to the window's pending list.

`FOLD_FUNCTION`, run by the ingest script, sums the pending entries in Lua and
adds each field once: to the window, to each reporter's window, with the
reporters set kept up; then it drops the list. Ingest runs it when the list
reaches `FOLD_AT` entries, or at once when its own entry is longer than
`FOLD_NOW_BYTES` (a batch, or a trace with many tools): a fold then handles at
most FOLD_AT - 1 short entries besides one group's, so it costs little more
than storing that group did, and the list stays small whoever reads.

The window's closed-cells hash (`window_closed`: the cells of long-closed
buckets, moved there by gate views) lives as long as the window: the fold and
the ingest script refresh its TTL with the window's.

Readers never write (but for the gate view's move into the closed-cells hash,
which changes no count). `READ_SCRIPT` answers the window, the pending entries,
the reporters, the closed cells and the asked-for reporters' windows in one atomic step, and
`pending_counts` adds the entries in Python: a read counts every stored trace
exactly once, works while Redis refuses writes (maxmemory), and declares every
key it reads (Redis Cluster redirects it whole while a slot migrates).

Entries: "<byte length of the reporter>:<reporter><field>\\n<value>\\n...",
the reporter "" for traces no token stamped. A reporter's window key is the
window key plus ":by:<reporter>" (`trace_keys.REPORTER_WINDOW_KEY_TEMPLATE`);
the fold builds it, so it is not among the script's KEYS. It hashes to the
role's slot like every key here, and a fold never runs while that slot
migrates: an ingest script that stores anything declares a new run-id key,
which the source node does not have, so Redis Cluster answers TRYAGAIN before
running it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

#: Pending entries at which the ingest script folds the list.
FOLD_AT = 64
#: An entry longer than this (a single trace's is about 250 bytes) is folded at once.
FOLD_NOW_BYTES = 1024

# fold(pending, window, reporters set, ttl): move every pending entry into the
# window and the reporters' windows, then drop the list. Lua numbers are
# doubles: a running sum about to pass 2^52 is added to Redis first (each
# entry's own values are sums Python made of at most one group's traces).
FOLD_FUNCTION = """
local function fold(pending, window, reporters, ttl)
  local entries = redis.call('LRANGE', pending, 0, -1)
  if #entries == 0 then return end
  redis.call('DEL', pending)
  local total, by, names = {}, {}, {}
  local function add(sums, key, name, value)
    local now = (sums[name] or 0) + value
    if now >= 4503599627370496 or now <= -4503599627370496 then
      redis.call('HINCRBY', key, name, string.format('%d', sums[name] or 0))
      now = value
    end
    sums[name] = now
  end
  for _, entry in ipairs(entries) do
    local size, rest = string.match(entry, '^(%d+):(.*)$')
    size = tonumber(size)
    local own, key
    if size > 0 then
      local reporter = string.sub(rest, 1, size)
      own = by[reporter]
      if not own then
        own = {}
        by[reporter] = own
        names[#names + 1] = reporter
      end
      key = window .. ':by:' .. reporter
      rest = string.sub(rest, size + 1)
    end
    for name, value in string.gmatch(rest, '([^\\n]+)\\n(%-?%d+)') do
      value = tonumber(value)
      add(total, window, name, value)
      if own then add(own, key, name, value) end
    end
  end
  for name, value in pairs(total) do
    redis.call('HINCRBY', window, name, string.format('%d', value))
  end
  redis.call('EXPIRE', window, ttl)
  redis.call('EXPIRE', window .. ':closed', ttl)
  for _, reporter in ipairs(names) do
    local key = window .. ':by:' .. reporter
    for name, value in pairs(by[reporter]) do
      redis.call('HINCRBY', key, name, string.format('%d', value))
    end
    redis.call('EXPIRE', key, ttl)
    redis.call('SADD', reporters, reporter)
  end
  if #names > 0 then redis.call('EXPIRE', reporters, ttl) end
end
"""

# KEYS: pending list, window hash, reporters set, the window's closed-cells hash
# (`window_closed`), then reporter window hashes.
# Returns {window HGETALL (flat), pending entries, reporter names, closed-cells HGETALL
#          (flat), then each asked-for reporter window's HGETALL (flat)}. Reads only.
READ_SCRIPT = """
local out = {redis.call('HGETALL', KEYS[2]), redis.call('LRANGE', KEYS[1], 0, -1),
             redis.call('SMEMBERS', KEYS[3]), redis.call('HGETALL', KEYS[4])}
for i = 5, #KEYS do out[#out + 1] = redis.call('HGETALL', KEYS[i]) end
return out
"""


def pending_counts(entries: Iterable[bytes | str]) -> tuple[Counter[str], dict[str, Counter[str]]]:
    """The pending entries summed: (the window's increments, each reporter's)."""
    total: Counter[str] = Counter()
    by: dict[str, Counter[str]] = {}
    for raw in entries:
        entry = raw if isinstance(raw, bytes) else raw.encode()
        size_text, _, rest = entry.partition(b":")
        size = int(size_text)
        own = None
        if size:
            own = by.setdefault(rest[:size].decode(), Counter())
            rest = rest[size:]
        lines = rest.decode().split("\n")
        for name, value in zip(lines[0:-1:2], lines[1::2]):
            total[name] += int(value)
            if own is not None:
                own[name] += int(value)
    return total, by
