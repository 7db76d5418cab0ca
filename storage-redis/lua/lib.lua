-- sluicegate: helpers shared by every script. Lua numbers are doubles, exact for integers
-- below 2^53; the one wider product the algorithms need is split so every step stays
-- below it. A function library's code sees no global but `redis` while it loads, so
-- the standard libraries are reached from inside functions only. The Rust side keeps inputs in this range (see `LuaAlgorithm` in src/lua.rs).
local SPLIT = 1048576 -- 2^20: small factors (limits, rates, counts) are at most this
local MAX_NOW = 4503599627370496 -- 2^52 microseconds: the year 2112
local EXACT = 9007199254740992 -- 2^53: every integer below is a double
-- The formats of a state's header and its 1, 2 or 3 fields, built once.
local FORMATS = { '>BBI8', '>BBI8I8', '>BBI8I8I8' }

local function corrupt(what)
  error({ err = 'SLUICEGATE corrupt state: ' .. what })
end

-- The string at `key`, or nil if there is none; a key of another type (a list, a hash)
-- is refused naming its type, never read as a fresh state.
local function get(key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' and value.err then
    error({ err = 'SLUICEGATE foreign ' .. redis.call('TYPE', key).ok })
  end
  return value or nil
end

-- a * b + c as (hi, lo) = hi * 2^20 + lo, exact for a <= 2^20, b <= 2^52, c < 2^52.
local function wide(a, b, c)
  local bh = math.floor(b / SPLIT)
  local lo = a * (b - bh * SPLIT) + c
  local carry = math.floor(lo / SPLIT)
  return a * bh + carry, lo - carry * SPLIT
end

-- a * b as (hi, lo), the smaller factor at most 2^20.
local function times(a, b)
  if a <= SPLIT then return wide(a, b, 0) end
  return wide(b, a, 0)
end

local function wide_le(h1, l1, h2, l2)
  return h1 < h2 or (h1 == h2 and l1 <= l2)
end

-- a * b <= c * d, each product with one factor at most 2^20.
local function product_le(a, b, c, d)
  local h1, l1 = times(a, b)
  local h2, l2 = times(c, d)
  return wide_le(h1, l1, h2, l2)
end

-- math.floor((a * b + c) / d) for a <= 2^20: the floating estimate is off by at most a few
-- units, and exact comparisons correct it.
local function muldiv(a, b, c, d)
  local n = a * b + c
  local q = math.floor(n / d)
  -- Fast path: n + d below 2^53 makes n, q * d and the remainder exact, and the estimate
  -- is off by at most one.
  if n < EXACT - d then
    local r = n - q * d
    if r < 0 then return q - 1 end
    if r >= d then return q + 1 end
    return q
  end
  local h, l = wide(a, b, c)
  while q > 0 do
    local qh, ql = times(q, d)
    if wide_le(qh, ql, h, l) then break end
    q = q - 1
  end
  while true do
    local qh, ql = times(q + 1, d)
    if not wide_le(qh, ql, h, l) then break end
    q = q + 1
  end
  return q
end

-- (math.floor(a / d), a % d) for 0 <= a <= 2^52, exact.
local function divmod(a, d)
  local q = math.floor(a / d)
  local r = a - q * d
  if r < 0 then return q - 1, r + d end
  if r >= d then return q + 1, r - d end
  return q, r
end

-- Reads a state: version 1, `tag`, then `n` big-endian u64 fields; returns the fields
-- and the bytes after them. Fields are exact up to 2^53; larger ones read as >= 2^53.
local function read(bytes, tag, n)
  local size = 2 + 8 * n
  if #bytes < size then corrupt('truncated') end
  -- Past the n fields, unpack returns the next position: dropped below.
  local version, t, a, b, c = struct.unpack(FORMATS[n], bytes)
  if version ~= 1 then corrupt('unsupported version') end
  if t ~= tag then corrupt('wrong algorithm') end
  if n < 3 then c = nil end
  if n < 2 then b = nil end
  local rest = ''
  if #bytes > size then rest = string.sub(bytes, size + 1) end
  return a, b, c, rest
end

-- Reads a state that must have no bytes after its fields.
local function read_exact(bytes, tag, n)
  local a, b, c, rest = read(bytes, tag, n)
  if rest ~= '' then corrupt('trailing bytes') end
  return a, b, c
end

local function write(tag, ...)
  return struct.pack(FORMATS[select('#', ...)], 1, tag, ...)
end

-- A decision, in the order of the reply: allowed (1 or 0), limit, remaining, retry (-1:
-- never), reset, delay. An array: much cheaper to build than a table of named fields.
local ALLOWED, LIMIT, REMAINING, RETRY, RESET, DELAY = 1, 2, 3, 4, 5, 6
local function decision(allowed, limit, remaining, retry, reset, delay)
  return { allowed and 1 or 0, limit, remaining, retry, reset, delay }
end

local function deny(limit, remaining, retry, reset)
  return decision(false, limit, remaining, retry, reset, 0)
end

local function admit(limit, remaining, reset, delay)
  return decision(true, limit, remaining, 0, reset, delay)
end

-- Algorithm constructors by name: each reads its parameters from ARGV at `i` and returns
-- decide(bytes or nil, now, cost, wait or nil) -> decision, new bytes or nil, and the
-- index after its parameters.
local algorithms = {}

local function build(argv, i)
  local make = algorithms[argv[i]]
  if not make then error({ err = 'SLUICEGATE unknown algorithm ' .. tostring(argv[i]) }) end
  return make(argv, i + 1)
end

-- A state written at the server's time lives until it is fresh; one written at an
-- explicit time has no expiry, since the server cannot know how fast that clock runs.
local function store(key, old, new, reset, explicit)
  if new and explicit then
    redis.call('SET', key, new)
  elseif new then
    redis.call('SET', key, new, 'PX', math.max(math.ceil(reset / 1000), 1))
  elseif old then
    redis.call('DEL', key)
  end
end

-- The server's TIME in microseconds, or the caller's explicit time `arg`.
local function clock(arg)
  local now = tonumber(arg)
  local explicit = now ~= nil
  if not explicit then
    local time = redis.call('TIME')
    now = time[1] * 1000000 + time[2]
  end
  if now > MAX_NOW then error({ err = 'SLUICEGATE time beyond 2^52 microseconds' }) end
  return now, explicit
end
