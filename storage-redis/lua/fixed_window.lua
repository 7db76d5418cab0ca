-- A window's decision of `cost` on `count` (the fixed and calendar windows'): the
-- decision and the count after it. Counted cost saturates at the limit (a larger count
-- decides the same) and never lowers a debt; the client clamps costs to at most
-- limit + 1, so the sum is exact.
local function window_decision(limit, count, cost, count_denied, until_end)
  local allowed = count + cost <= limit
  if allowed or count_denied then count = math.min(count + cost, math.max(limit, count)) end
  local reset = count > 0 and until_end or 0
  local remaining = math.max(limit - count, 0)
  if allowed then return admit(limit, remaining, reset, 0), count end
  return deny(limit, remaining, cost <= limit and until_end or -1, reset), count
end

-- A window's count moved by a report's `adjust`, up to limit + overdraft: the units
-- recorded and the new state (`tag`, `field`, count, in the frame of `origins`), nil
-- when the count is 0.
local function adjust_window(tag, origins, field, count, most, adjust)
  local recorded
  recorded, count = adjust_count(count, most - count, adjust)
  return recorded, count > 0 and write_in(origins, tag, field, count) or nil
end

-- Fixed window (limit L per period P): tag 1, fields (window, count).
algorithms.fixed_window = function(argv, i)
  local limit, period = tonumber(argv[i]), tonumber(argv[i + 1])
  local count_denied, over = argv[i + 2] == '1', tonumber(argv[i + 3])
  -- The fields: the window, the count (see `frame`).
  local shift, origins, last = frame(period, 'wc')
  -- With `adjust` (a report's signed units), adds them to the current window's count
  -- instead (a window that has ended is fresh), up to limit + overdraft, and returns the
  -- units recorded and the new state.
  local decide = function(bytes, now, cost, wait, adjust)
    now = now + shift
    local window = divmod(now, period)
    local count = 0
    if bytes then
      local w, c = read_exact(bytes, 1, 2, origins)
      if w * period > last then corrupt('window') end
      if c < 1 or c > limit + over then corrupt('count') end
      if w >= window then window, count = w, c end
    end
    if adjust then return adjust_window(1, origins, window, count, limit + over, adjust) end
    local start = window * period
    if now < start then now = start end
    local d
    d, count = window_decision(limit, count, cost, count_denied, start + period - now)
    return d, count > 0 and write_in(origins, 1, window, count) or nil
  end
  return decide, i + 4
end
