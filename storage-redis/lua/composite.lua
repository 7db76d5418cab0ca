-- Composite: every member must admit; member k keeps its state in KEYS[k]. A denial
-- changes no member and reports each at cost 0; the decision reports the member with the
-- fewest remaining, the longest retry, reset and delay.
local function decide_all(KEYS, members, now, cost, wait, explicit)
  local n = #members
  local old, decisions, new = {}, {}, {}
  for k = 1, n do
    old[k] = get(KEYS[k])
    decisions[k], new[k] = members[k](old[k], now, cost, wait)
  end
  local allowed, retry, delay = true, 0, 0
  for k = 1, n do
    local d = decisions[k]
    allowed = allowed and d[ALLOWED] == 1
    if retry >= 0 then retry = d[RETRY] < 0 and -1 or math.max(retry, d[RETRY]) end
    delay = math.max(delay, d[DELAY])
  end
  if not allowed then
    delay = 0
    for k = 1, n do decisions[k], new[k] = members[k](old[k], now, 0) end
  end
  local binding, reset = decisions[1], 0
  for k = 1, n do
    local d = decisions[k]
    if d[REMAINING] < binding[REMAINING] then binding = d end
    reset = math.max(reset, d[RESET])
    store(KEYS[k], old[k], new[k], d[RESET], explicit)
  end
  local d = decision(allowed, binding[LIMIT], binding[REMAINING], retry, reset, delay)
  return d
end
