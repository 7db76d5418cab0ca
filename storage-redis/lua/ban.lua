-- Ban: wraps another algorithm; more than `threshold` denied units within one ban window
-- bans the key for `duration`. Tag 7, fields (window, denied, banned_until), then the
-- inner algorithm's state, if any.

-- The denied count of a ban whose threshold, the decimal `arg`, is beyond 2^52 (up to
-- the core's 2^64 - 2), held exactly as halves: the count's reader and its adder.
-- `cost_arg`: the call's cost as sent.
local function wide_count(arg, cost_arg)
  local H = halves()
  local th, tl = H.decimal(arg)
  if not th or th >= TWO32 or (th == TWO32 - 1 and tl == TWO32 - 1) then
    error({ err = 'SLUICEGATE ban threshold beyond 2^64 - 2' })
  end
  local mh, ml = H.absolute(1, th, tl)
  local count = {}
  -- The count in a state's bytes (its second field), at most threshold + 1.
  function count.read(bytes)
    local h, l = struct.unpack('>I4I4', bytes, 11)
    if not wide_le(h, l, mh, ml) then corrupt('denied') end
    return h, l
  end
  -- The count plus `cost`, saturated one past the threshold, and whether it is past.
  -- A cost of 2^53 or more is the call's own (a take's units are below a limit), read
  -- exactly from its argument.
  function count.add(h, l, cost)
    if cost < EXACT then
      h, l = H.absolute(cost, h, l)
    else
      local ch, cl = H.decimal(cost_arg)
      h, l = H.absolute(cl, h + ch, l)
    end
    if wide_le(h, l, th, tl) then return h, l, false end
    return mh, ml, true
  end
  return count
end

algorithms.ban = function(argv, i)
  local threshold, ban_window, duration = tonumber(argv[i]), tonumber(argv[i + 1]), tonumber(argv[i + 2])
  -- A threshold beyond 2^52 (one comparison decides) counts in halves: `denied + cost`
  -- and `threshold + 1` are not exact as doubles then.
  local wide = threshold > MAX_NOW and wide_count(argv[i], argv[3])
  local inner, next_i = build(argv, i + 3)
  -- The fields: the window, the denied count, the ban's end (see `frame`); the inner
  -- algorithm decides in its own frame, at the call's now.
  local shift, origins, last = frame(ban_window, 'wct')
  local latest_ban = origins and last + MAX_PERIOD or MAX_NOW * 2
  -- A report records nothing on a ban (see docs/design/reported-costs.md).
  local decide = function(bytes, now, cost, wait, adjust)
    local inner_now = now
    now = now + shift
    -- Beyond an epoch of 0 the ban's end is kept as its stored bytes unless a ban is
    -- imposed: one far in the past is not exact relative to the epoch.
    local window, denied, banned_until, inner_bytes, until_bytes = 0, 0, 0, nil, nil
    -- With `wide`, the denied count is (dh, dl); `denied` is then dh + dl, only 0 when
    -- the count is.
    local dh, dl = 0, 0
    if origins then
      banned_until = halves().relative(0, 0, origins[5], origins[6])
      until_bytes = bytes and string.sub(bytes, 19, 26) or '\0\0\0\0\0\0\0\0'
    end
    if bytes then
      window, denied, banned_until, inner_bytes = read(bytes, 7, 3, origins)
      if window * ban_window > last then corrupt('window') end
      if wide then
        dh, dl = wide.read(bytes)
        denied = dh + dl
      elseif denied > threshold + 1 then
        corrupt('denied')
      end
      if banned_until > latest_ban then corrupt('banned_until') end
      if inner_bytes == '' then inner_bytes = nil end
    end
    if adjust then return 0, bytes end
    local current = divmod(now, ban_window)
    if window < current then window, denied, dh, dl = current, 0, 0, 0 end
    local d, inner_new = inner(inner_bytes, inner_now, cost)
    if now < banned_until then
      local stored = inner(inner_bytes, inner_now, 0)
      d = deny(d[LIMIT], 0, d[RETRY], stored[RESET])
    elseif d[ALLOWED] == 1 then
      inner_bytes = inner_new
    else
      local over
      if wide then
        dh, dl, over = wide.add(dh, dl, cost)
        denied = dh + dl
      else
        -- Saturates one past the threshold, where every larger count decides the same.
        denied = math.min(denied + cost, threshold + 1)
        over = denied > threshold
      end
      if over then
        banned_until = now + duration
        until_bytes = nil
        d[REMAINING] = 0
      end
    end
    local ban_left = math.max(banned_until - now, 0)
    if d[ALLOWED] == 0 and d[RETRY] >= 0 then d[RETRY] = math.max(d[RETRY], ban_left) end
    local window_left = denied > 0 and (window + 1) * ban_window - now or 0
    d[RESET] = math.max(d[RESET], ban_left, window_left)
    if inner_bytes == nil and denied == 0 and ban_left == 0 then return d, nil end
    local state = write_in(origins, 7, window, denied, banned_until)
    if wide then
      state = string.sub(state, 1, 10) .. struct.pack('>I4I4', dh, dl) .. string.sub(state, 19)
    end
    if until_bytes then state = string.sub(state, 1, 18) .. until_bytes end
    return d, state .. (inner_bytes or '')
  end
  return decide, next_i
end
