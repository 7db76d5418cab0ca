-- Sliding window counter (limit L per period P): tag 3, fields (window, prev, cur); the
-- previous window counts with weight (P - elapsed) / P.
-- Ticks until `room * P >= weight * (P - e)`, i.e. until a weighted window fits.
local function first_fit(weight, room, period)
  if weight == 0 or room >= weight then return 0 end
  return period - muldiv(room, period, 0, weight)
end

algorithms.sliding_counter = function(argv, i)
  local limit, period, over = tonumber(argv[i]), tonumber(argv[i + 1]), tonumber(argv[i + 2])
  -- The fields: the window, the previous and current counts (see `frame`).
  local shift, origins, last = frame(period, 'wcc')

  -- With `adjust` (a report's signed units), adds them to the current window's count
  -- instead, while the estimate stays within limit + overdraft (a refund comes off the
  -- current count only), and returns the units recorded and the new state.
  local decide = function(bytes, now, cost, wait, adjust)
    now = now + shift
    local window = divmod(now, period)
    local prev, cur = 0, 0
    if bytes then
      local w, p, c = read_exact(bytes, 3, 3, origins)
      if w * period > last then corrupt('window') end
      if p > limit + over then corrupt('prev') end
      if c > limit + over or p + c == 0 then corrupt('cur') end
      if w >= window then
        window, prev, cur = w, p, c
      elseif w + 1 == window then
        prev = c
      end
    end
    local start = window * period
    local elapsed = math.max(now, start) - start
    if adjust then
      -- The most cur may reach: carried + cur * P <= (limit + overdraft) * P, where
      -- carried rounds up to whole units.
      local most = limit + over - muldiv(prev, period - elapsed, period - 1, period)
      local recorded
      recorded, cur = adjust_count(cur, most - cur, adjust)
      return recorded, prev + cur > 0 and write_in(origins, 3, window, prev, cur) or nil
    end
    local room = limit - cur - cost
    local allowed = cost <= limit and room >= 0 and product_le(prev, period - elapsed, room, period)
    if allowed then cur = cur + cost end
    local carried = muldiv(prev, period - elapsed, period - 1, period)
    local remaining = math.max(limit - cur - carried, 0)
    local reset = 0
    if cur > 0 then
      reset = 2 * period - elapsed
    elseif prev > 0 then
      reset = period - elapsed
    end
    local state = reset > 0 and write_in(origins, 3, window, prev, cur) or nil
    if allowed then return admit(limit, remaining, reset, 0), state end
    local retry = -1
    if cost > limit then
      retry = -1
    elseif cur + cost <= limit then
      retry = first_fit(prev, limit - cur - cost, period) - elapsed
    else
      retry = period - elapsed + first_fit(cur, limit - cost, period)
    end
    return deny(limit, remaining, retry, reset), state
  end
  return decide, i + 3
end
