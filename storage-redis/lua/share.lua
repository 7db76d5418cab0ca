-- sluicegate: one limit's shares among the quota subscribers of every replica (Envoy's
-- quota protocol): the core's `share::Ledger::targets` and `share::grant` in Lua.
-- KEYS[1]: the limit's hash, a field per subscriber holding "demand target live expires"
-- (-1: none; expires in ms). ARGV: [1] now in ms ('' = the server's TIME), [2] the time
-- to live of a subscriber in ms, [3] the limit (at most 2^32), [4] the floor's divisor,
-- [5] headroom %, [6] hysteresis %, [7] how many subscribers leave, then their fields,
-- then the caller's subscribers as triples: field, demand, live share (-1: none).
-- Drops the expired and the leaving, re-computes every target (subscribers in field
-- order), grants the caller's, and replies with their live shares and targets in the
-- caller's order.

local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = time[1] * 1000 + math.floor(time[2] / 1000)
end
local ttl, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local divisor, headroom, hysteresis = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])

local function idiv(a, d)
  local q = divmod(a, d)
  return q
end
-- An optional share: -1 is none.
local function opt(x) if x < 0 then return nil end return x end
local function arg(x) return x or -1 end

local holdings = {}
local raw = redis.call('HGETALL', KEYS[1])
for i = 1, #raw, 2 do
  local d, t, l, e = string.match(raw[i + 1], '^(%d+) (%-?%d+) (%-?%d+) (%d+)$')
  if d and tonumber(e) > now then
    holdings[raw[i]] = {
      demand = tonumber(d), target = opt(tonumber(t)), live = opt(tonumber(l)),
      expires = tonumber(e), stored = raw[i + 1],
    }
  else
    redis.call('HDEL', KEYS[1], raw[i])
  end
end
local i = 8
for _ = 1, tonumber(ARGV[7]) do
  holdings[ARGV[i]] = nil
  redis.call('HDEL', KEYS[1], ARGV[i])
  i = i + 1
end
local mine, order = {}, {}
while i + 2 <= #ARGV do
  local h = holdings[ARGV[i]] or {}
  h.demand, h.live = math.min(tonumber(ARGV[i + 1]), limit), opt(tonumber(ARGV[i + 2]))
  h.expires = now + ttl
  holdings[ARGV[i]] = h
  mine[ARGV[i]] = true
  order[#order + 1] = ARGV[i]
  i = i + 3
end
local names = {}
for name in pairs(holdings) do names[#names + 1] = name end
table.sort(names)
local n = #names

-- Ledger::sharing, then Sharing::share of the limit less the reserve.
local floor = math.max(idiv(idiv(limit, math.max(n, 1)), math.max(divisor, 1)), 1)
local reserve = math.min(floor, idiv(limit, n + 1))
local L = limit - reserve
local f = math.min(floor, idiv(L, math.max(n, 1)))
-- Each subscriber's want, computed once: the level's search reads them many times.
local wants, wanted = {}, 0
for k, name in ipairs(names) do
  local d = holdings[name].demand
  wants[k] = math.min(math.max(d + idiv(d * headroom + 99, 100), f), L)
  wanted = wanted + wants[k]
end
local shares = {}
local spare = wanted <= L
if n == 0 then
  -- nothing to share
elseif spare then
  local each, first = divmod(L - wanted, n)
  for k = 1, n do
    shares[k] = wants[k] + each + ((k <= first) and 1 or 0)
  end
else
  -- The highest level whose capped wants fit, summed only as far as the limit.
  local min = math.min
  local function under(level)
    local sum = 0
    for k = 1, n do
      sum = sum + min(wants[k], level)
      if sum > L then return sum end
    end
    return sum
  end
  local fits, over = f, L
  while over - fits > 1 do
    local mid = fits + idiv(over - fits, 2)
    if under(mid) <= L then fits = mid else over = mid end
  end
  local left = L - under(fits)
  for k = 1, n do
    local w = wants[k]
    local one = (left > 0 and w > fits) and 1 or 0
    left = left - one
    shares[k] = math.min(w, fits) + one
  end
end
-- Sharing::hold: a target near the last one keeps it.
local function keeps(h, new)
  local current = h.target
  local by = current and math.abs(current - new)
  if current and current >= f and (by <= 1 or by * 100 <= current * hysteresis) then
    return current
  end
  return nil
end
for k, name in ipairs(names) do
  local current = keeps(holdings[name], shares[k])
  if current and current <= shares[k] then shares[k] = current end
end
local room = L
for k = 1, n do room = room - shares[k] end
room = math.max(room, 0)
for k, name in ipairs(names) do
  local h = holdings[name]
  local current = keeps(h, shares[k])
  if current and current > shares[k] then
    local more = current - shares[k]
    if more <= room and (spare or current <= wants[k]) then
      room = room - more
      shares[k] = current
    end
  end
end
for k, name in ipairs(names) do holdings[name].target = shares[k] end

-- grant: the caller's shrinking subscribers at once, then its growing ones within room.
local function held(h) return math.max(h.live or 0, h.target or 0) end
local function grows(h) return (h.target or 0) > (h.live or 0) end
for _, name in ipairs(names) do
  local h = holdings[name]
  if mine[name] and not grows(h) then h.live = h.target or 0 end
end
local total = 0
for _, name in ipairs(names) do total = total + held(holdings[name]) end
for _, name in ipairs(names) do
  local h = holdings[name]
  if mine[name] and grows(h) then
    local others = total - held(h)
    local space = math.max(limit - others, 0)
    h.live = math.max(math.min(space, h.target or 0), h.live or 0)
    total = others + held(h)
  end
end

-- Every holding whose record changed is written, in batches within Lua's stack.
local changed = {}
for _, name in ipairs(names) do
  local h = holdings[name]
  local record = string.format('%d %d %d %d', h.demand, arg(h.target), arg(h.live), h.expires)
  if record ~= h.stored then
    changed[#changed + 1] = name
    changed[#changed + 1] = record
  end
  if #changed >= 1000 then
    redis.call('HSET', KEYS[1], unpack(changed))
    changed = {}
  end
end
if #changed > 0 then redis.call('HSET', KEYS[1], unpack(changed)) end
if n > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
local reply = {}
for _, name in ipairs(order) do
  reply[#reply + 1] = { holdings[name].live, holdings[name].target }
end
return reply
