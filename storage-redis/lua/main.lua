-- tollgate: the entry point. ARGV: now ('' = the server's TIME), cost, max wait ('' = the
-- algorithm's default), the least TTL in ms, then the algorithm: its name and parameters. KEYS: the key, or
-- one key per member of a composite (sharing a hash tag).
local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
if now > MAX_NOW then error({ err = 'TOLLGATE time beyond 2^52 microseconds' }) end
local cost, wait, min_ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local function store(key, old, new, reset)
  if new then
    redis.call('SET', key, new, 'PX', math.max(math.ceil(reset / 1000), min_ttl, 1))
  elseif old then
    redis.call('DEL', key)
  end
end

local d
if ARGV[5] == 'composite' then
  d = composite(ARGV, 6, now, cost, wait, store)
else
  local decide = build(ARGV, 5)
  local old = redis.call('GET', KEYS[1])
  if not old then old = nil end
  local new
  d, new = decide(old, now, cost, wait)
  store(KEYS[1], old, new, d.reset)
end
return { d.allowed and 1 or 0, d.limit, d.remaining, d.retry, d.reset, d.delay, now }
