-- Ban: wraps another algorithm; more than `threshold` denied units within one ban window
-- bans the key for `duration`. Tag 7, fields (window, denied, banned_until), then the
-- inner algorithm's state, if any.
algorithms.ban = function(argv, i)
  local threshold, ban_window, duration = tonumber(argv[i]), tonumber(argv[i + 1]), tonumber(argv[i + 2])
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
    if origins then
      banned_until = halves().relative(0, 0, origins[5], origins[6])
      until_bytes = bytes and string.sub(bytes, 19, 26) or '\0\0\0\0\0\0\0\0'
    end
    if bytes then
      window, denied, banned_until, inner_bytes = read(bytes, 7, 3, origins)
      if window * ban_window > last then corrupt('window') end
      if denied > threshold + 1 then corrupt('denied') end
      if banned_until > latest_ban then corrupt('banned_until') end
      if inner_bytes == '' then inner_bytes = nil end
    end
    if adjust then return 0, bytes end
    local current = divmod(now, ban_window)
    if window < current then window, denied = current, 0 end
    local d, inner_new = inner(inner_bytes, inner_now, cost)
    if now < banned_until then
      local stored = inner(inner_bytes, inner_now, 0)
      d = deny(d[LIMIT], 0, d[RETRY], stored[RESET])
    elseif d[ALLOWED] == 1 then
      inner_bytes = inner_new
    else
      -- Saturates one past the threshold, where every larger count decides the same.
      denied = math.min(denied + cost, threshold + 1)
      if denied > threshold then
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
    if until_bytes then state = string.sub(state, 1, 18) .. until_bytes end
    return d, state .. (inner_bytes or '')
  end
  return decide, next_i
end
