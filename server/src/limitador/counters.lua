-- sluicegate: limitador's counters, the calls of many requests in one script, in order,
-- each all at once and alone (a request's error leaves the others be). Each counter is
-- an anchored window (the core's `AnchoredWindow`): version 1, tag 11, then its start
-- and count as big-endian u64s; a window starts at its first counted hit and ends
-- `period` later, when the key expires. Instants and counts are exact as doubles below
-- 2^53. KEYS: each call's counters in turn (one namespace: one hash tag). ARGV: each
-- call's number of counters; 'cu' (admit iff every counter has room for the delta, then
-- count it on all), 'c' (only whether) or 'u' (count it whatever the limit); the delta;
-- now in microseconds, or '' for the server's TIME; then each counter's limit (0: it
-- admits nothing and keeps no count) and period in microseconds. The reply is one
-- string of records, one per call: 0, the verdict (1 or 0), then each counter's
-- remaining and the microseconds until its window ends (u64s); or 1, the length of the
-- error's text (u32) and the text. Big-endian.
local time
local function server_time()
  if not time then
    local t = redis.call('TIME')
    time = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return time
end

-- One call: its counters KEYS[k + 1 ..], its arguments ARGV[a ..].
local function apply(k, a)
  local n, mode, delta = tonumber(ARGV[a]), ARGV[a + 1], tonumber(ARGV[a + 2])
  local now = tonumber(ARGV[a + 3]) or server_time()
  local keys, limits, periods, starts, counts = {}, {}, {}, {}, {}
  for i = 1, n do
    keys[i] = KEYS[k + i]
    limits[i], periods[i] = tonumber(ARGV[a + 2 + 2 * i]), tonumber(ARGV[a + 3 + 2 * i])
    starts[i], counts[i] = now, 0
    local bytes = redis.pcall('GET', keys[i])
    if type(bytes) == 'table' and bytes.err then
      error({ err = 'SLUICEGATE foreign ' .. redis.call('TYPE', keys[i]).ok })
    end
    if bytes then
      if #bytes ~= 18 then error({ err = 'SLUICEGATE corrupt state: truncated' }) end
      local version, tag, start, count = struct.unpack('>BBI8I8', bytes)
      if version ~= 1 or tag ~= 11 or count < 1 then
        error({ err = 'SLUICEGATE corrupt state: not an anchored window' })
      end
      if now < start + periods[i] then starts[i], counts[i] = start, count end
    end
  end
  local admitted = 1
  if mode ~= 'u' then
    for i = 1, n do
      if limits[i] == 0 or counts[i] + delta > limits[i] then admitted = 0 end
    end
  end
  if admitted == 1 and mode ~= 'c' and delta > 0 then
    for i = 1, n do
      if limits[i] > 0 then
        counts[i] = counts[i] + delta
        local left = starts[i] + periods[i] - math.max(now, starts[i])
        redis.call('SET', keys[i], struct.pack('>BBI8I8', 1, 11, starts[i], counts[i]),
          'PX', math.ceil(left / 1000))
      end
    end
  end
  local record = { struct.pack('>BB', 0, admitted) }
  for i = 1, n do
    local remaining, left = 0, 0
    if limits[i] > 0 then
      remaining = math.max(limits[i] - counts[i], 0)
      left = periods[i]
      if counts[i] > 0 then left = starts[i] + periods[i] - math.max(now, starts[i]) end
    end
    record[i + 1] = struct.pack('>I8I8', remaining, left)
  end
  return table.concat(record)
end

local out, k, a = {}, 0, 1
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  local ok, r = pcall(apply, k, a)
  if not ok then
    local text = type(r) == 'table' and r.err or tostring(r)
    r = struct.pack('>BI4', 1, #text) .. text
  end
  out[#out + 1] = r
  k, a = k + n, a + 4 + 2 * n
end
return table.concat(out)
