-- Composite: every member must admit; member k keeps its state in KEYS[k]. A denial
-- changes no member and reports each at cost 0; the decision reports the member with the
-- fewest remaining, the longest retry, reset and delay.
-- Decides on the members' states `old`: the decision, the new states and each member's
-- decision (whose reset is its key's time to live).
local function decide_states(members, old, now, cost, wait)
  local n = #members
  local decisions, new = {}, {}
  for k = 1, n do
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
  end
  local d = decision(allowed, binding[LIMIT], binding[REMAINING], retry, reset, delay)
  return d, new, decisions
end

local function decide_all(KEYS, members, now, cost, wait, explicit)
  local old = {}
  for k = 1, #members do old[k] = get(KEYS[k]) end
  local d, new, decisions = decide_states(members, old, now, cost, wait)
  for k = 1, #members do store(KEYS[k], old[k], new[k], decisions[k][RESET], explicit) end
  return d
end

-- A report of `adjust` units on every member (each records what it can; the least is
-- reported), stored, then the decision a cost of zero gets: its six fields, then a slot
-- for now (the caller's) and the units recorded.
local function report_all(KEYS, members, now, adjust, explicit)
  local old, new, recorded = {}, {}, nil
  for k = 1, #members do
    old[k] = get(KEYS[k])
    local r
    r, new[k] = members[k](old[k], now, nil, nil, adjust)
    recorded = math.min(recorded or r, r)
  end
  local d, _, decisions = decide_states(members, new, now, 0)
  for k = 1, #members do store(KEYS[k], old[k], new[k], decisions[k][RESET], explicit) end
  d[8] = recorded
  return d
end
