-- Fixed window (limit L per period P): tag 1, fields (window, count).
algorithms.fixed_window = function(argv, i)
  local limit, period = tonumber(argv[i]), tonumber(argv[i + 1])
  local count_denied = argv[i + 2] == '1'
  -- With `refund`, gives `cost` units back to the current window instead (a window that
  -- has ended is fresh) and returns only the new state.
  local decide = function(bytes, now, cost, wait, refund)
    local window = divmod(now, period)
    local count = 0
    if bytes then
      local w, c = read_exact(bytes, 1, 2)
      if w * period > MAX_NOW then corrupt('window') end
      if c < 1 or c > limit then corrupt('count') end
      if w >= window then window, count = w, c end
    end
    if refund then
      count = count - math.min(cost, count)
      return nil, count > 0 and write(1, window, count) or nil
    end
    local start = window * period
    if now < start then now = start end
    local until_end = start + period - now
    local allowed = cost <= math.max(limit - count, 0)
    -- Counted cost saturates at the limit (a larger count decides the same); the client
    -- clamps costs to at most limit + 1, so the sum is exact.
    if allowed or count_denied then count = math.min(count + cost, limit) end
    local reset = count > 0 and until_end or 0
    local state = count > 0 and write(1, window, count) or nil
    local remaining = math.max(limit - count, 0)
    if allowed then return admit(limit, remaining, reset, 0), state end
    return deny(limit, remaining, cost <= limit and until_end or -1, reset), state
  end
  return decide, i + 3
end
