-- sluicegate: the entry point, run(mode, KEYS, ARGV), called by a script's tail with its
-- first argument or by the library's function for each mode. ARGV: the mode, now ('' =
-- the server's TIME), cost, max wait ('' = the algorithm's default), then the algorithm:
-- its name and parameters.
-- KEYS: the key, or one key per member of a composite (sharing a hash tag); for 'purge',
-- any keys. Modes:
--   decide  decide a request and store the new state;
--   read    return the keys' values, refusing keys that hold no string;
--   reset   delete the keys if each is absent or holds a valid state, else refuse;
--   remove  as reset, returning now, then the keys' values as read (a state moved out);
--   seed    where none of the keys exists, store the values after the algorithm's
--           arguments (one per key, '' for none) as a decision of cost 0 on them leaves
--           them (so with the expiry such a decision gives); 1 if none existed, else 0;
--   purge   delete each key holding a valid state of some member; return how many;
--   take    (fleets) take up to `cost` units, as many as are admissible now: the decision
--           for them (for none: for a cost of zero), now, the units taken, the new state;
--           with a max wait (buckets), a charge: all `cost` units as one reservation;
--   refund  (fleets) give `cost` units back, unless the server's time has reached the
--           max-wait argument (the grant's deadline; at an explicit time the client
--           compares and sends '' or 0); the decision for a cost of zero afterwards, then
--           now;
--   report  add the signed `cost` (a report's adjustment) to what the key has taken
--           (see docs/design/reported-costs.md): the decision for a cost of zero
--           afterwards, now and the units recorded.
local function run(mode, KEYS, ARGV)
  local now, explicit, stamp = clock(ARGV[2])
  local cost, wait = tonumber(ARGV[3]), tonumber(ARGV[4])

  -- `rest`: the index of the first argument after the algorithm's.
  local members, composite, rest = {}, ARGV[5] == 'composite', 7
  if composite then
    for k = 1, tonumber(ARGV[6]) do members[k], rest = build(ARGV, rest) end
  else
    members[1], rest = build(ARGV, 5)
  end

  if mode == 'read' then
    local values = {}
    for k = 1, #KEYS do values[k] = get(KEYS[k]) or false end
    return values
  elseif mode == 'reset' or mode == 'remove' then
    -- Validate every key before deleting any: decide at cost 0 reads the whole state.
    local values = { stamp }
    for k = 1, #KEYS do
      local value = get(KEYS[k])
      if value then members[k](value, now, 0) end
      values[k + 1] = value or false
    end
    local deleted = redis.call('DEL', unpack(KEYS))
    if mode == 'remove' then return values end
    return deleted
  elseif mode == 'seed' then
    for k = 1, #KEYS do
      if redis.call('EXISTS', KEYS[k]) == 1 then return 0 end
    end
    for k = 1, #KEYS do
      local value = ARGV[rest + k - 1]
      if value ~= '' then
        local d, new = members[k](value, now, 0)
        store(KEYS[k], nil, new, d[RESET], explicit)
      end
    end
    return 1
  elseif mode == 'purge' then
    local deleted = 0
    for k = 1, #KEYS do
      local ok, value = pcall(get, KEYS[k])
      if ok and value then
        for m = 1, #members do
          if pcall(members[m], value, now, 0) then
            deleted = deleted + redis.call('DEL', KEYS[k])
            break
          end
        end
      end
    end
    return deleted
  end

  if mode == 'take' then
    local old = get(KEYS[1])
    local d, new, units
    if wait then
      -- A charge (buckets): `cost` units already admitted, booked at once even beyond
      -- the bucket's capacity, as a reservation waiting up to `wait` (a debt).
      d, new = members[1](old, now, cost, wait)
      units = d[ALLOWED] == 1 and cost or 0
    else
      d, new = members[1](old, now, 0)
      units = math.min(cost, d[REMAINING])
      if units > 0 then d, new = members[1](old, now, units) end
    end
    store(KEYS[1], old, new, d[RESET], explicit)
    d[7], d[8], d[9] = stamp, units, new or false
    return d
  elseif mode == 'refund' then
    local old = get(KEYS[1])
    local new = old
    if not wait or now < wait then
      local _, refunded = members[1](old, now, nil, nil, -cost)
      new = refunded
    end
    local d = members[1](new, now, 0)
    store(KEYS[1], old, new, d[RESET], explicit)
    d[7] = stamp
    return d
  elseif mode == 'report' then
    local d = report_all(KEYS, members, now, cost, explicit)
    d[7] = stamp
    return d
  end

  local d
  if composite then
    d = decide_all(KEYS, members, now, cost, wait, explicit)
  else
    local old = get(KEYS[1])
    local new
    d, new = members[1](old, now, cost, wait)
    store(KEYS[1], old, new, d[RESET], explicit)
  end
  d[7] = stamp
  return d
end
