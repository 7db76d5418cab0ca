-- Fixed window (limit L per period P): tag 1, fields (window, count).
algorithms.fixed_window = function(argv, i)
  local limit, period = tonumber(argv[i]), tonumber(argv[i + 1])
  local count_denied = argv[i + 2] == '1'
  local max_count = count_denied and MAX_NOW or limit
  local decide = function(bytes, now, cost)
    local window = divmod(now, period)
    local count = 0
    if bytes then
      local w, c = read_exact(bytes, 1, 2)
      if w * period > MAX_NOW then corrupt('window') end
      if c < 1 or c > max_count then corrupt('count') end
      if w >= window then window, count = w, c end
    end
    local start = window * period
    if now < start then now = start end
    local until_end = start + period - now
    local allowed = cost <= math.max(limit - count, 0)
    if allowed or count_denied then count = count + cost end
    if count > max_count then corrupt('count beyond 2^52') end
    local reset = count > 0 and until_end or 0
    local state = count > 0 and write(1, window, count) or nil
    local remaining = math.max(limit - count, 0)
    if allowed then return admit(limit, remaining, reset, 0), state end
    return deny(limit, remaining, cost <= limit and until_end or -1, reset), state
  end
  return decide, i + 3
end
