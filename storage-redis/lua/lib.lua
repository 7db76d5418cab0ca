-- sluicegate: helpers shared by every script. Lua numbers are doubles, exact for integers
-- below 2^53; the wider products and quotients the core computes in 128 bits (a limit or
-- rate up to 10^9 times a period or a scaled instant) are computed in limbs of 24 bits,
-- each held in a double, only when a product does not fit 2^53: one comparison decides.
-- A function library's code sees no global but `redis` while it loads, so the standard
-- libraries are reached from inside functions only. The Rust side keeps inputs in this
-- range (see `LuaAlgorithm` in src/lua.rs).
local LIMB = 16777216 -- 2^24
local HALF = 281474976710656 -- 2^48: a wide number is hi * 2^48 + lo
local MAX_NOW = 4503599627370496 -- 2^52 microseconds: the year 2112
local EXACT = 9007199254740992 -- 2^53: every integer below is a double
local TWO32 = 4294967296
local MAX_PERIOD = 31622400000000 -- 366 days, the core's longest period
-- The leases' and locks' largest counter: a token, expiry or count + 1 is still exact.
local MAX_EXACT = 9007199254740990 -- 2^53 - 2
local MAX_TICKS_HI = 1073741824 -- the core's last instant, 2^62, is (2^30, 0) in halves
-- The formats of a state's header and its 1, 2 or 3 fields, built once.
local FORMATS = { '>BBI8', '>BBI8I8', '>BBI8I8I8' }
-- The call's epoch E as halves (hi, lo), set by `clock`: 0 while now is at most 2^52,
-- every instant then a double as it is; else now itself, instants then held relative to
-- it (a call beyond 2^52 is an explicit time: the server's cannot be before 2112).
local epoch_hi, epoch_lo = 0, 0

local function corrupt(what)
  error({ err = 'SLUICEGATE corrupt state: ' .. what })
end

-- The entries of `list` (leases, places) unexpired at `now`.
local function live(list, now)
  local kept = {}
  for _, e in ipairs(list) do
    if e.expiry > now then kept[#kept + 1] = e end
  end
  return kept
end

-- Where `owner`'s entry is in `list`, if it has one.
local function index_of(list, owner)
  for k, e in ipairs(list) do
    if e.owner == owner then return k end
  end
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

-- x, an integer below 2^72, as three limbs of 24 bits, lowest first. Dividing by a
-- power of two is exact, so every step is.
local function limbs(x)
  local x0 = x % LIMB
  x = (x - x0) / LIMB
  local x1 = x % LIMB
  return x0, x1, (x - x1) / LIMB
end

-- a * b + c as (hi, lo) = hi * 2^48 + lo, 0 <= lo < 2^48, exact for a, b, c below 2^72
-- and a result below 2^101: a schoolbook product of limbs, each column (at most three
-- products below 2^48 and carries) below 2^53.
local function wide(a, b, c)
  local a0, a1, a2 = limbs(a)
  local b0, b1, b2 = limbs(b)
  local c0, c1, c2 = limbs(c)
  local t = a0 * b0 + c0
  local r0 = t % LIMB
  t = a0 * b1 + a1 * b0 + c1 + (t - r0) / LIMB
  local r1 = t % LIMB
  t = a0 * b2 + a1 * b1 + a2 * b0 + c2 + (t - r1) / LIMB
  local r2 = t % LIMB
  t = a1 * b2 + a2 * b1 + (t - r2) / LIMB
  local r3 = t % LIMB
  return r2 + (r3 + (a2 * b2 + (t - r3) / LIMB) * LIMB) * LIMB, r0 + r1 * LIMB
end

local function wide_le(h1, l1, h2, l2)
  return h1 < h2 or (h1 == h2 and l1 <= l2)
end

-- a * b <= c * d, exactly. A product beyond 2^53 rounds to at least 2^53, so two below
-- it are exact.
local function product_le(a, b, c, d)
  local x, y = a * b, c * d
  if x < EXACT and y < EXACT then return x <= y end
  local h1, l1 = wide(a, b, 0)
  local h2, l2 = wide(c, d, 0)
  return wide_le(h1, l1, h2, l2)
end

-- (math.floor(a / d), a % d) for |a| + d below 2^53, exact: the floating estimate is
-- off by at most one.
local function divmod(a, d)
  local q = math.floor(a / d)
  local r = a - q * d
  if r < 0 then return q - 1, r + d end
  if r >= d then return q + 1, r - d end
  return q, r
end

-- (math.floor((a * b + c) / d), the remainder), exact for a quotient below 2^53 and d
-- below 2^50. Fast path: a * b + c + d below 2^53 (one comparison; a larger result
-- rounds to at least 2^53) is exact as a double. Else the floating estimate of the
-- quotient is off by a few units at most, so the remainder it leaves, computed in
-- limbs, is a few divisors at most: exact as a double, and it corrects the estimate.
local function muldivmod(a, b, c, d)
  local n = a * b + c
  if n < EXACT - d then return divmod(n, d) end
  local h, l = wide(a, b, c)
  local q = math.floor((h * HALF + l) / d)
  local qh, ql = wide(q, d, 0)
  local k, r = divmod((h - qh) * HALF + (l - ql), d)
  return q + k, r
end

-- math.floor((a * b + c) / d), as `muldivmod`.
local function muldiv(a, b, c, d)
  local q = muldivmod(a, b, c, d)
  return q
end

-- The helpers of numbers held as two 32-bit halves (instants beyond 2^52, a tat beyond
-- 2^53, a ban's threshold and denied count beyond 2^52), built on first use: a script
-- defines its functions on every call, and only such calls need these.
local halves_helpers = nil
local function halves()
  if halves_helpers then return halves_helpers end
  -- The formats of a state's header and its 1, 2 or 3 fields as two halves each.
  local H = { formats = { '>BBI4I4', '>BBI4I4I4I4', '>BBI4I4I4I4I4I4' } }
  -- x - y for x and y as halves: exact below 2^53 in magnitude; beyond, rounded, its
  -- sign and its order among smaller values exact.
  function H.relative(xh, xl, yh, yl)
    return (xh - yh) * TWO32 + (xl - yl)
  end
  -- y + x as halves, for y as halves and x an integer below 2^53 in magnitude: exact.
  function H.absolute(x, yh, yl)
    local l = x % TWO32
    local h = (x - l) / TWO32 + yh
    l = l + yl
    if l >= TWO32 then return h + 1, l - TWO32 end
    return h, l
  end
  -- A decimal string of at most 20 digits as halves (beyond 2^64 - 1 when h >= 2^32),
  -- or nil for any other string.
  function H.decimal(s)
    if not string.match(s, '^%d+$') or #s > 20 then return nil end
    local head = tonumber(string.sub(s, 1, -10)) or 0
    return muldivmod(head, 1000000000, tonumber(string.sub(s, -9)), TWO32)
  end
  -- A time argument (a decimal string) up to 2^62 as halves; an error beyond.
  function H.time(s)
    local h, l = H.decimal(s)
    if not h or h > MAX_TICKS_HI or (h == MAX_TICKS_HI and l > 0) then
      error({ err = 'SLUICEGATE time beyond 2^62 microseconds' })
    end
    return h, l
  end
  -- An instant argument (a decimal string) relative to the epoch: exact for an
  -- instant within 2^53 of it.
  function H.instant(arg)
    local h, l = H.time(arg)
    return H.relative(h, l, epoch_hi, epoch_lo)
  end
  -- `now` (below 2^53) as the origins (see `frame`) of a state's instant and count.
  function H.origins(now)
    local h, l = H.absolute(now, 0, 0)
    return { h, l, 0, 0 }
  end
  -- Whether a state's field `k` is zero in its stored bytes (whatever frame reads it).
  function H.zero(bytes, k)
    return string.sub(bytes, 8 * k - 5, 8 * k + 2) == '\0\0\0\0\0\0\0\0'
  end
  -- `frame` beyond an epoch of 0.
  function H.frame(period, kinds)
    -- O / period by long division of the halves: each step's quotient is below 2^53.
    local qh, r = divmod(epoch_hi, period)
    local ql, shift = muldivmod(r, TWO32, epoch_lo, period)
    local oh, ol = H.absolute(-shift, epoch_hi, epoch_lo)
    local origins = {}
    for k = 1, #kinds do
      local kind = string.sub(kinds, k, k)
      if kind == 'w' then
        origins[2 * k - 1], origins[2 * k] = qh, ql
      elseif kind == 't' then
        origins[2 * k - 1], origins[2 * k] = oh, ol
      else
        origins[2 * k - 1], origins[2 * k] = 0, 0
      end
    end
    return shift, origins, H.relative(MAX_TICKS_HI, 0, oh, ol)
  end
  halves_helpers = H
  return H
end

-- The frame of an algorithm whose windows are `period` long (1: none) in this call:
-- its origin O, the epoch rounded down to a multiple of `period`, so that windows
-- counted from O are the absolute ones. `kinds` names each field of its state: 'w' a
-- window (held relative to O / period), 't' an instant (relative to O), 'c' a count.
-- Returns E - O (added to the call's now, relative to E), the fields' origins as halves
-- for `read` and `write_in` (nil at an epoch of 0: the fields are as stored), and the
-- core's last instant relative to O (2^52, the scripts' own bound, at an epoch of 0).
local function frame(period, kinds)
  if epoch_hi == 0 then return 0, nil, MAX_NOW end
  return halves().frame(period, kinds)
end

-- Reads a state: version 1, `tag`, then `n` big-endian u64 fields; returns the fields
-- and the bytes after them. Fields are exact up to 2^53; larger ones read as >= 2^53.
-- With `origins` (see `frame`), each field relative to its origin.
local function read(bytes, tag, n, origins)
  local size = 2 + 8 * n
  if #bytes < size then corrupt('truncated') end
  -- Past the n fields, unpack returns the next position: dropped below.
  local version, t, a, b, c
  if origins then
    local H, ah, al, bh, bl, ch, cl = halves()
    version, t, ah, al, bh, bl, ch, cl = struct.unpack(H.formats[n], bytes)
    local relative = H.relative
    a = relative(ah, al, origins[1], origins[2])
    if n > 1 then b = relative(bh, bl, origins[3], origins[4]) end
    if n > 2 then c = relative(ch, cl, origins[5], origins[6]) end
  else
    version, t, a, b, c = struct.unpack(FORMATS[n], bytes)
  end
  if version ~= 1 then corrupt('unsupported version') end
  if t ~= tag then corrupt('wrong algorithm') end
  if n < 3 then c = nil end
  if n < 2 then b = nil end
  local rest = ''
  if #bytes > size then rest = string.sub(bytes, size + 1) end
  return a, b, c, rest
end

-- Reads a state that must have no bytes after its fields.
local function read_exact(bytes, tag, n, origins)
  local a, b, c, rest = read(bytes, tag, n, origins)
  if rest ~= '' then corrupt('trailing bytes') end
  return a, b, c
end

-- Writes a state of 1, 2 or 3 fields, relative to `origins` (see `frame`; nil: as
-- they are).
local function write_in(origins, tag, a, b, c)
  if not origins then
    if c then return struct.pack(FORMATS[3], 1, tag, a, b, c) end
    if b then return struct.pack(FORMATS[2], 1, tag, a, b) end
    return struct.pack(FORMATS[1], 1, tag, a)
  end
  local H = halves()
  local absolute = H.absolute
  local ah, al = absolute(a, origins[1], origins[2])
  local bh, bl = absolute(b, origins[3], origins[4])
  if not c then return struct.pack(H.formats[2], 1, tag, ah, al, bh, bl) end
  local ch, cl = absolute(c, origins[5], origins[6])
  return struct.pack(H.formats[3], 1, tag, ah, al, bh, bl, ch, cl)
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

-- The server's TIME in microseconds, or the caller's explicit time `arg`, relative to
-- the call's epoch (see `epoch_hi`), which this sets; `narrow`: a time beyond 2^52 is
-- refused (the leases' and the sliding log's bound). Returns now, whether it is
-- explicit, and the time as the reply gives it (beyond 2^52, the argument's digits).
local function clock(arg, narrow)
  local now = tonumber(arg)
  local explicit = now ~= nil
  if not explicit then
    local time = redis.call('TIME')
    now = time[1] * 1000000 + time[2]
  end
  epoch_hi, epoch_lo = 0, 0
  if now <= MAX_NOW then return now, explicit, now end
  if narrow then error({ err = 'SLUICEGATE time beyond 2^52 microseconds' }) end
  epoch_hi, epoch_lo = halves().time(arg)
  return 0, explicit, arg
end

-- A count moved by a report's signed `adjust`: up by at most `room` units, down to zero
-- at most. Returns the units recorded and the new count.
local function adjust_count(count, room, adjust)
  if adjust >= 0 then
    local recorded = math.min(adjust, math.max(room, 0))
    return recorded, count + recorded
  end
  local recorded = math.min(-adjust, count)
  return recorded, count - recorded
end
