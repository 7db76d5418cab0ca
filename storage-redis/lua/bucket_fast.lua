-- sluicegate: a bucket's decision on its fast path (token bucket, leaky bucket, pacing; one
-- key), the call most limiters make. Every quantity is held relative to `now` in units
-- of 1 / rate tick, one double each: the state's arrival time a = tat - now, the cost
-- c = cost * period, the burst t = burst * period. Below 2^52 each is an integer a double
-- holds exactly, and so is every sum, difference and product below, and a quotient's
-- floor (or ceiling) of two such integers is exact too: the math is the core's, exact,
-- with no splitting into halves. One comparison checks the bound; anything beyond it
-- (or a state the path does not read at once: another tag, a corrupt one) returns nil,
-- and the caller decides on the general path (`run`), which words every error.
-- The reply is a alone: the client derives the decision (allowed, remaining, retry,
-- reset, delay) from it with the core.
-- The argument, one string: tag, burst, rate, period, cost, max wait (resolved: 0 for a
-- meter's check, 2^53 for pacing's), now (above 2^52: the server's time, `server_now`
-- if given, as a batch reads it once for all its calls, else read here).
local FAST_ARGS = '>BI8I8I8I8I8I8'
local FAST_STATE = '>BBI8I8'
local FAST_BOUND = 4503599627370496 -- 2^52

-- The server's TIME in microseconds.
local function server_time()
  local time = redis.call('TIME')
  return time[1] * 1000000 + time[2]
end

local function bucket_fast(key, arg, server_now)
  local tag, burst, rate, period, cost, wait, now = struct.unpack(FAST_ARGS, arg)
  local explicit = now <= FAST_BOUND
  if not explicit then
    now = server_now or server_time()
  end
  -- A key of another type raises WRONGTYPE here; the client names its type.
  local bytes = redis.call('GET', key)
  local a = 0
  if bytes then
    if #bytes ~= 18 then return nil end
    local version, stored, t, f = struct.unpack(FAST_STATE, bytes)
    if version ~= 1 or stored ~= tag or f >= rate or t + f == 0 then return nil end
    -- Stale (tat <= now) is fresh. Past the bound, a and so n are past it too.
    a = (t - now) * rate + f
    if a < 0 then a = 0 end
  end
  local full, n = burst * period, a + cost * period
  if n >= FAST_BOUND or full >= FAST_BOUND or cost > burst or now > FAST_BOUND then
    return nil
  end
  -- The meter admits once the bucket has room (n - full <= wait); a pacing request is
  -- admitted while the queue has room (n <= full) and acts at its slot (a <= wait).
  local admitted
  if tag == 6 then
    admitted = n <= full and a <= wait * rate
  else
    admitted = n - full <= wait * rate
  end
  if admitted and n > 0 then
    local q = math.floor(n / rate)
    local new = struct.pack(FAST_STATE, 1, tag, now + q, n - q * rate)
    if explicit then
      redis.call('SET', key, new)
    else
      -- Until fresh: ceil(n / rate) ticks rounded up to a millisecond (at least 1, as
      -- n > 0). A number argument: Redis formats it exactly (%.17g), cheaper than
      -- Lua's tostring.
      redis.call('SET', key, new, 'PX', math.ceil(n / (rate * 1000)))
    end
  elseif bytes and a == 0 then
    -- A stale state is fresh: no key. (A denial of a live state changes nothing.)
    redis.call('DEL', key)
  end
  return a
end
