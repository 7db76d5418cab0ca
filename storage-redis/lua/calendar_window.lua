-- Calendar window (limit L in the period [start, end) the caller computes, a day, week
-- or month): tag 10, fields (end, count). A state whose end is after now is live, to its
-- own end; else the count is 0 in the given period. At the server's time, a decision or
-- report outside the period is refused (the caller computes the period again); at an
-- explicit time, now is clamped into it, as the core does.

algorithms.calendar_window = function(argv, i)
  local limit, over = tonumber(argv[i]), tonumber(argv[i + 1])
  -- The fields: the end, the count (see `frame`); the period's bounds in that frame.
  local _, origins, last = frame(1, 'tc')
  local start, finish = tonumber(argv[i + 2]), tonumber(argv[i + 3])
  if origins then
    local H = halves()
    start, finish = H.instant(argv[i + 2]), H.instant(argv[i + 3])
  end
  -- A decision's or report's own arguments (reads, resets and purges only validate).
  local checked = argv[2] == '' and (argv[1] == 'decide' or argv[1] == 'report')
  local decide = function(bytes, now, cost, wait, adjust)
    if checked and (now < start or now >= finish) then
      error({ err = 'SLUICEGATE out of period ' .. string.format('%.0f', now) })
    end
    now = math.min(math.max(now, start), finish - 1)
    local e, count = finish, 0
    if bytes then
      local se, c = read_exact(bytes, 10, 2, origins)
      local zero = se < 1
      if origins then zero = halves().zero(bytes, 1) end
      if zero or se > last + MAX_PERIOD then corrupt('end') end
      if c < 1 or c > limit + over then corrupt('count') end
      if se > now then e, count = se, c end
    end
    if adjust then return adjust_window(10, origins, e, count, limit + over, adjust) end
    local d
    d, count = window_decision(limit, count, cost, false, e - now)
    return d, count > 0 and write_in(origins, 10, e, count) or nil
  end
  return decide, i + 4
end
