-- sluicegate: limitador's counters, a request's all in one call. Each counter is an
-- anchored window (the core's `AnchoredWindow`): version 1, tag 11, then its start and
-- count as big-endian u64s; a window starts at its first counted hit and ends `period`
-- later, when the key expires. Instants and counts are exact as doubles below 2^53.
-- KEYS: the counters (one namespace: one hash tag). ARGV[1]: 'cu' (admit iff every
-- counter has room for the delta, then count it on all), 'c' (only whether) or 'u'
-- (count it whatever the limit); ARGV[2]: the delta; ARGV[3]: now in microseconds, or ''
-- for the server's TIME; then each counter's limit (0: it admits nothing and keeps no
-- count) and period in microseconds. Returns the verdict (1 or 0), then each counter's
-- remaining and the microseconds until its window ends.
local mode, delta = ARGV[1], tonumber(ARGV[2])
local now = tonumber(ARGV[3])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local n = #KEYS
local limits, periods, starts, counts = {}, {}, {}, {}
for i = 1, n do
  limits[i], periods[i] = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  starts[i], counts[i] = now, 0
  local bytes = redis.pcall('GET', KEYS[i])
  if type(bytes) == 'table' and bytes.err then
    error({ err = 'SLUICEGATE foreign ' .. redis.call('TYPE', KEYS[i]).ok })
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
      redis.call('SET', KEYS[i], struct.pack('>BBI8I8', 1, 11, starts[i], counts[i]),
        'PX', math.ceil(left / 1000))
    end
  end
end
local reply = { admitted }
for i = 1, n do
  local remaining, left = 0, 0
  if limits[i] > 0 then
    remaining = math.max(limits[i] - counts[i], 0)
    left = periods[i]
    if counts[i] > 0 then left = starts[i] + periods[i] - math.max(now, starts[i]) end
  end
  reply[#reply + 1] = remaining
  reply[#reply + 1] = left
end
return reply
