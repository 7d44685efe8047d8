"""A stage window's pending increments, and folding them into its hashes.

Ingest does not add a trace's increments to the window hash field by field:
that was about 30 HINCRBY calls per trace (the window, the reporter's own
window, the tally), some 18 us of the ingest script's 29 us, on the one
thread every resolve's refresh also waits on. It appends one entry, the
group's summed increments and its reporter, to the window's pending list.
`FOLD_FUNCTION` sums pending entries in Lua and adds each field once: to the
window, to each reporter's window, with the reporters set kept up. It runs

- inside the ingest script once the list reaches `FOLD_AT` entries, so the
  list (memory, and the cost of one fold) stays bounded whoever reads; and
- before every read of a window (`FOLD_READ_SCRIPT`), in the same atomic step
  as the read, so a reader sees every acknowledged trace, as before.

Entries: "<byte length of the reporter>:<reporter><field>\\n<value>\\n...",
the reporter "" for traces no token stamped. A reporter's window key is the
window key plus ":by:<reporter>" (`trace_keys.REPORTER_WINDOW_KEY_TEMPLATE`):
the script builds it, and it hashes to the role's slot like every key here.
"""

from __future__ import annotations

#: Pending entries at which the ingest script folds the list itself.
#: A fold costs about 2 us an entry plus one HINCRBY per distinct field;
#: at 64 the ingest script's longest run stays well under a millisecond.
FOLD_AT = 64

# fold(pending, window, reporters set, ttl): move every pending entry into the
# window and the reporters' windows, then drop the list. Sums are Lua numbers
# (doubles): exact to 2^53, far past what FOLD_AT entries of one window add up to.
FOLD_FUNCTION = """
local function fold(pending, window, reporters, ttl)
  local entries = redis.call('LRANGE', pending, 0, -1)
  if #entries == 0 then return end
  local total, by, names = {}, {}, {}
  for _, entry in ipairs(entries) do
    local size, rest = string.match(entry, '^(%d+):(.*)$')
    size = tonumber(size)
    local own
    if size > 0 then
      local reporter = string.sub(rest, 1, size)
      own = by[reporter]
      if not own then
        own = {}
        by[reporter] = own
        names[#names + 1] = reporter
      end
      rest = string.sub(rest, size + 1)
    end
    for name, value in string.gmatch(rest, '([^\\n]+)\\n(%-?%d+)') do
      value = tonumber(value)
      total[name] = (total[name] or 0) + value
      if own then own[name] = (own[name] or 0) + value end
    end
  end
  for name, value in pairs(total) do
    redis.call('HINCRBY', window, name, string.format('%d', value))
  end
  redis.call('EXPIRE', window, ttl)
  for _, reporter in ipairs(names) do
    local key = window .. ':by:' .. reporter
    for name, value in pairs(by[reporter]) do
      redis.call('HINCRBY', key, name, string.format('%d', value))
    end
    redis.call('EXPIRE', key, ttl)
    redis.call('SADD', reporters, reporter)
  end
  if #names > 0 then redis.call('EXPIRE', reporters, ttl) end
  redis.call('DEL', pending)
end
"""

# KEYS: pending list, window hash, reporters set. ARGV: window ttl.
# Returns {window HGETALL as a flat list, reporter names}.
FOLD_READ_SCRIPT = FOLD_FUNCTION + """
fold(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
return {redis.call('HGETALL', KEYS[2]), redis.call('SMEMBERS', KEYS[3])}
"""

