-- The bucket algorithms (token bucket, leaky bucket, pacing): one GCRA over the
-- theoretical arrival time tat, in units of 1 / R tick, stored as (ticks, fraction).
-- Every instant below is held relative to `now` as a pair (t, f) = t + f / R ticks with
-- 0 <= f < R, so all sums stay small and exact.
local BUCKET_ARGS = '>' .. ('I8'):rep(8)

-- (t1, f1) - (t2, f2), fractions of 1 / `rate`.
local function sub(t1, f1, t2, f2, rate)
  if f1 < f2 then return t1 - t2 - 1, f1 - f2 + rate end
  return t1 - t2, f1 - f2
end

local function le(t1, f1, t2, f2)
  return t1 < t2 or (t1 == t2 and f1 <= f2)
end

-- A duration in whole ticks, rounded up; 0 when negative.
local function ticks(t, f)
  if t < 0 then return 0 end
  if f > 0 then return t + 1 end
  return t
end

-- Whole units of cost a bucket can still take while tat is (t, f) after now.
local function bucket_room(rate, period, tol_t, tol_f, t, f)
  if not le(t, f, tol_t, tol_f) then return 0 end
  local ft, ff = sub(tol_t, tol_f, t, f, rate)
  return muldiv(rate, ft, ff, period)
end

-- cost * period / rate as (ticks, remainder), exact: a call whose cost the client could
-- not know (take, refund) gets its scaled cost here.
local function scale(cost, rate, period)
  return muldivmod(cost, period, 0, rate)
end

-- A state whose tat is (t, f) after now, in the frame of `origins`; at an epoch of 0
-- (no origins) absolute while below 2^53, else relative to now, from halves.
local function tat_state(tag, origins, now, t, f)
  if not origins and now + t >= EXACT then origins, now = halves().origins(now), 0 end
  return write_in(origins, tag, now + t, f)
end

local function gcra(tag)
  return function(argv, i)
    -- One argument of eight big-endian u64 (one unpack, not eight tonumber): the burst,
    -- rate and period, then burst * period / R and cost * period / R as (ticks,
    -- remainder), divided by the caller (exact in Rust), then the overdraft.
    local packed = argv[i]
    if #packed ~= 64 then error({ err = 'SLUICEGATE bad bucket arguments' }) end
    local burst, rate, period, tol_t, tol_f, cost_t, cost_f, over = struct.unpack(BUCKET_ARGS, packed)
    local pacing = tag == 6
    -- The fields: the arrival time's ticks, its fraction (see `frame`): beyond 2^52
    -- relative to the epoch (the call's now); else as stored while below 2^53, and
    -- relative to now beyond (one comparison decides). Every tat within 2^53 ticks of
    -- now, and every sum below, is then exact for the core's horizons (up to 2^53); a
    -- reservation booking beyond 2^53 ticks is refused.
    local _, origins = frame(1, 'tc')
    -- With `adjust` (a report's signed units), adds them to what the key has taken
    -- instead (see docs/design/reported-costs.md) and returns the units recorded and the
    -- new state; a pacing queue records nothing and keeps its state.
    local decide = function(bytes, now, cost, wait, adjust)
      local stored, o = bytes, origins
      wait = wait or (pacing and MAX_NOW * 2 or 0)
      -- a = tat - now, zero for a fresh or stale state.
      local at, af = 0, 0
      if bytes then
        local t, f = read_exact(bytes, tag, 2, o)
        if t >= EXACT and not o then
          o, now = halves().origins(now), 0
          t, f = read_exact(bytes, tag, 2, o)
        end
        if t - now > EXACT then corrupt('tat') end
        if f >= rate then corrupt('tat_frac') end
        if t + f == 0 and not o or o and f == 0 and halves().zero(bytes, 1) then
          corrupt('tat')
        end
        if t > now or (t == now and f > 0) then
          at, af = t - now, f
        else
          bytes = nil
        end
      end
      if adjust then
        if pacing then return 0, stored end
        local units, recorded = math.abs(adjust), 0
        if adjust >= 0 then
          -- Up to a full burst plus the overdraft after now.
          local bt, bf = scale(burst + over, rate, period)
          recorded = math.min(units, bucket_room(rate, period, bt, bf, at, af))
          local st, sf = scale(recorded, rate, period)
          at, af = at + st, af + sf
          if af >= rate then at, af = at + 1, af - rate end
        else
          -- Back to now at most: the whole units owed, the last possibly in part, and
          -- at most a burst plus the overdraft (a fleet's charge may owe more).
          local owed, part = muldivmod(rate, at, af, period)
          if part > 0 then owed = owed + 1 end
          recorded = math.min(units, owed, burst + over)
          local st, sf = scale(recorded, rate, period)
          at, af = sub(at, af, st, sf, rate)
          if at < 0 then at, af = 0, 0 end
        end
        if at + af == 0 then return recorded, nil end
        return recorded, tat_state(tag, o, now, at, af)
      end
      if cost > burst then
        local room = bucket_room(rate, period, tol_t, tol_f, at, af)
        return deny(burst, room, -1, ticks(at, af)), bytes
      end
      -- n = new tat - now; d = new tat - full_at, where full_at = now + tolerance.
      -- The scaled cost was computed for this call's cost; the only other cost asked
      -- (by a ban's or a composite's report) is zero.
      -- A take's cost is known here only: its arguments carry a scaled cost of zero.
      local ct, cf = cost_t, cost_f
      if cost == 0 then
        ct, cf = 0, 0
      elseif ct + cf == 0 then
        ct, cf = scale(cost, rate, period)
      end
      -- d = (a - tolerance) + c: within 2^53 of zero, as a <= 2^53 and c <= tolerance,
      -- where a + c may not be.
      local dt, df = sub(at, af, tol_t, tol_f, rate)
      dt, df = dt + ct, df + cf
      if df >= rate then dt, df = dt + 1, df - rate end
      -- The meter acts once the bucket has room; a pacing request acts at its slot.
      local act_t, act_f, slack = dt, df, wait
      if pacing then act_t, act_f, slack = at, af, 0 end
      if le(dt, df, slack, 0) and le(act_t, act_f, wait, 0) then
        -- n = d + tolerance, refused beyond 2^53 ticks (a reservation that deep).
        local carry = df + tol_f >= rate and 1 or 0
        local nf, most = df + tol_f - carry * rate, EXACT - tol_t - carry
        if dt > most or (dt == most and nf > 0) then corrupt('tat') end
        local nt = dt + tol_t + carry
        local state = nil
        if nt > 0 or nf > 0 then state = tat_state(tag, o, now, nt, nf) end
        local room = bucket_room(rate, period, tol_t, tol_f, nt, nf)
        return admit(burst, room, ticks(nt, nf), ticks(act_t, act_f)), state
      end
      local retry = math.max(ticks(dt - slack, df), ticks(act_t - wait, act_f))
      local room = bucket_room(rate, period, tol_t, tol_f, at, af)
      return deny(burst, room, retry, ticks(at, af)), bytes
    end
    return decide, i + 1
  end
end

algorithms.token_bucket = gcra(4)
algorithms.leaky_bucket = gcra(5)
algorithms.pacing = gcra(6)

-- The general path's arguments (see main.lua) for a fast call (bucket_fast.lua) that
-- path left: the scaled burst and cost computed here, exactly.
local BUCKET_NAMES = { [4] = 'token_bucket', [5] = 'leaky_bucket', [6] = 'pacing' }
local function bucket_args(arg)
  local tag, burst, rate, period, cost, wait, now = struct.unpack(FAST_ARGS, arg)
  local tol_t, tol_f = scale(burst, rate, period)
  local cost_t, cost_f = 0, 0
  if cost <= burst then cost_t, cost_f = scale(cost, rate, period) end
  local packed = struct.pack(BUCKET_ARGS, burst, rate, period, tol_t, tol_f, cost_t, cost_f, 0)
  if now > MAX_NOW then now = '' end
  return { 'decide', now, cost, wait, BUCKET_NAMES[tag] or '', packed }
end
