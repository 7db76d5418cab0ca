-- Sliding log (limit L per period P): tag 2, a count then (at, cost) entries, oldest first.
local CHUNK = 64
local CHUNK_FORMAT = '>' .. ('I8I8'):rep(CHUNK)

-- A log's entries, checked as the core's decoder checks them.
local function parse(bytes, limit)
  local n, _, _, rest = read(bytes, 2, 1)
  if n < 1 or n > limit then corrupt('len') end
  if #rest ~= 16 * n then corrupt(#rest < 16 * n and 'truncated' or 'trailing bytes') end
  local at, costs, used, k = {}, {}, 0, 0
  -- Entries are unpacked CHUNK at a time: one call instead of CHUNK.
  while k < n do
    local m = math.min(CHUNK, n - k)
    local fields = { struct.unpack(m == CHUNK and CHUNK_FORMAT or '>' .. string.rep('I8I8', m), rest, 16 * k + 1) }
    for j = 1, m do
      local t, c = fields[2 * j - 1], fields[2 * j]
      if t > MAX_NOW or (k > 0 and t <= at[k]) then corrupt('at') end
      if c < 1 or c > limit - used then corrupt('cost') end
      k = k + 1
      at[k], costs[k], used = t, c, used + c
    end
  end
  return at, costs, n, used, rest
end

-- The log's bytes: entries first..kept as they are in `rest` (not re-packed), then the
-- entries after `kept`, each packed; nil when empty.
local function log_bytes(at, costs, first, kept, last, rest)
  if last < first then return nil end
  local parts = { write_in(nil, 2, last - first + 1), string.sub(rest, 16 * first - 15, 16 * kept) }
  for k = math.max(kept + 1, first), last do
    parts[#parts + 1] = struct.pack('>I8I8', at[k], costs[k])
  end
  return table.concat(parts)
end

algorithms.sliding_log = function(argv, i)
  local limit, period, over = tonumber(argv[i]), tonumber(argv[i + 1]), tonumber(argv[i + 2])
  -- Its instants are kept as doubles, up to 2^52 (the client refuses later times).
  if epoch_hi ~= 0 then error({ err = 'SLUICEGATE time beyond 2^52 microseconds' }) end

  -- With `adjust` (a report's signed units), logs them at now instead while the window
  -- holds at most limit + overdraft (a refund takes them off the newest entries first),
  -- and returns the units recorded and the new state.
  local decide = function(bytes, now, cost, wait, adjust)
    local at, costs, last, used, rest = {}, {}, 0, 0, ''
    if bytes then at, costs, last, used, rest = parse(bytes, limit + over) end
    -- Entries first..kept stay as they are in `rest`; only a merged or new last entry
    -- is packed again.
    local kept = last
    if last > 0 and at[last] > now then now = at[last] end
    local first = 1
    while first <= last and at[first] + period <= now do
      used = used - costs[first]
      first = first + 1
    end
    local before = used
    local logged = cost
    if adjust then
      local recorded
      recorded, used = adjust_count(used, limit + over - used, adjust)
      if adjust < 0 then
        local owed = recorded
        while owed > 0 do
          local taken = math.min(owed, costs[last])
          costs[last], owed = costs[last] - taken, owed - taken
          kept = math.min(kept, last - 1)
          if costs[last] == 0 then last = last - 1 end
        end
        return recorded, log_bytes(at, costs, first, kept, last, rest)
      end
      logged = recorded
    end
    local allowed = adjust or cost <= limit - used
    if allowed and logged > 0 then
      if last >= first and at[last] == now then
        costs[last] = costs[last] + logged
        kept = last - 1
      else
        last = last + 1
        at[last], costs[last] = now, logged
      end
      if not adjust then used = used + logged end
    end
    local state = log_bytes(at, costs, first, kept, last, rest)
    if adjust then return logged, state end
    local reset = last >= first and at[last] + period - now or 0
    local remaining = math.max(limit - used, 0)
    if allowed then return admit(limit, remaining, reset, 0), state end
    local retry = -1
    if cost <= limit then
      local freed, ready = limit - before, now
      for k = first, last do
        freed = freed + costs[k]
        if freed >= cost then ready = at[k] + period break end
      end
      retry = ready - now
    end
    return deny(limit, remaining, retry, reset), state
  end
  return decide, i + 3
end
