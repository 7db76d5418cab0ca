-- sluicegate: leases (tag 9), the core's `Concurrency` transitions on its bytes: the last
-- fencing token and the number of leases, then per lease (oldest grant first) its
-- token, expiry, hold count, owner length and owner. The entry point is
-- lease(op, KEYS, ARGV), its helpers defined once (per library load, or per script call).
-- ARGV: the operation ('acquire', 'release', 'renew', or 'read': the keys' values), now
-- ('' = the server's TIME), the most leases per key, the owner, the ttl (acquire and
-- renew). KEYS: the keys, all decided together: every key grants (or is held by the
-- owner) or nothing changes.
-- Replies per key: acquire {allowed, max, remaining, retry, reset, token, expiry, holds};
-- release and renew {token, expiry, holds}. An owner without a lease on some key:
-- error 'SLUICEGATE not held', nothing changed.

-- The lease table in `bytes` (nil: a fresh key), checked as the core's decoder checks it.
local function parse(bytes, max)
  local state = { last = 0, leases = {} }
  if not bytes then return state end
  local last, count = read(bytes, 9, 2)
  if last > MAX_EXACT then corrupt('token beyond 2^53') end
  if count > max then corrupt('count') end
  state.last = last
  local at, after, owners = 19, 0, {}
  for k = 1, count do
    if #bytes < at + 31 then corrupt('truncated') end
    local token, expiry, holds, len = struct.unpack('>I8I8I8I8', bytes, at)
    if token <= after or token > last then corrupt('token') end
    if expiry > MAX_EXACT then corrupt('expiry beyond 2^53') end
    if holds < 1 then corrupt('holds') end
    if holds > MAX_EXACT then corrupt('holds beyond 2^53') end
    if len < 1 or len > 128 then corrupt('owner_len') end
    if #bytes < at + 31 + len then corrupt('truncated') end
    local who = string.sub(bytes, at + 32, at + 31 + len)
    if owners[who] then corrupt('owner') end
    owners[who] = true
    state.leases[k] = { owner = who, token = token, expiry = expiry, holds = holds }
    at, after = at + 32 + len, token
  end
  if #bytes >= at then corrupt('trailing bytes') end
  return state
end

-- When the state is fresh: no lease held and the clock past the last token.
local function fresh_at(state)
  local at = state.last + 1
  for _, lease in ipairs(state.leases) do at = math.max(at, lease.expiry) end
  return at
end

-- Writes `state`, or deletes the key once it is fresh. At the server's time the key
-- lives until the state is fresh, so a token never repeats after it is gone; at an
-- explicit time it has no expiry, as every state written at an explicit time.
local function store_leases(key, old, state, now, explicit)
  local fresh = fresh_at(state)
  if fresh <= now then
    if old then redis.call('DEL', key) end
    return fresh
  end
  local parts = { struct.pack('>BBI8I8', 1, 9, state.last, #state.leases) }
  for _, l in ipairs(state.leases) do
    parts[#parts + 1] = struct.pack('>I8I8I8I8', l.token, l.expiry, l.holds, #l.owner) .. l.owner
  end
  local bytes = table.concat(parts)
  if explicit then
    redis.call('SET', key, bytes)
  else
    redis.call('SET', key, bytes, 'PX', math.max(math.ceil((fresh - now) / 1000), 1))
  end
  return fresh
end

-- A lease as replied: token, expiry, holds.
local function grant(lease)
  return { lease.token, lease.expiry, lease.holds }
end

local function lease(op, KEYS, ARGV)
  local now, explicit = clock(ARGV[2], true)
  local max, owner, ttl = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])

  if op == 'read' then
    local values = {}
    for k = 1, #KEYS do values[k] = get(KEYS[k]) or false end
    return values
  end

  local old, states = {}, {}
  for k = 1, #KEYS do
    old[k] = get(KEYS[k])
    states[k] = parse(old[k], max)
    states[k].leases = live(states[k].leases, now)
  end

  if op == 'acquire' then
    -- Every key must grant: re-entered by the owner or a lease free.
    local granted = true
    for k = 1, #KEYS do
      local s = states[k]
      granted = granted and (index_of(s.leases, owner) ~= nil or #s.leases < max)
    end
    local replies = {}
    for k = 1, #KEYS do
      local s = states[k]
      local reply = nil
      if granted then
        local i = index_of(s.leases, owner)
        if i then
          local lease = s.leases[i]
          lease.holds = lease.holds + 1
          lease.expiry = math.max(lease.expiry, now + ttl)
          reply = grant(lease)
        else
          s.last = math.max(s.last + 1, now)
          s.leases[#s.leases + 1] = { owner = owner, token = s.last, expiry = now + ttl, holds = 1 }
          reply = grant(s.leases[#s.leases])
        end
      end
      local reset = store_leases(KEYS[k], old[k], s, now, explicit) - now
      if reset < 0 then reset = 0 end
      local remaining = max - #s.leases
      if reply then
        replies[k] = { 1, max, remaining, 0, reset, reply[1], reply[2], reply[3] }
      else
        -- The time until the earliest lease expires: 0 on a key that would grant.
        local retry = 0
        if remaining == 0 then
          retry = s.leases[1].expiry
          for _, lease in ipairs(s.leases) do retry = math.min(retry, lease.expiry) end
          retry = retry - now
        end
        replies[k] = { 0, max, remaining, retry, reset, 0, 0, 0 }
      end
    end
    return replies
  end

  -- Release and renew: the owner must hold a lease on every key.
  for k = 1, #KEYS do
    if not index_of(states[k].leases, owner) then error({ err = 'SLUICEGATE not held' }) end
  end
  local replies = {}
  for k = 1, #KEYS do
    local s = states[k]
    local i = index_of(s.leases, owner)
    local lease = s.leases[i]
    if op == 'release' then
      lease.holds = lease.holds - 1
      if lease.holds == 0 then table.remove(s.leases, i) end
    else
      lease.expiry = now + ttl
    end
    replies[k] = grant(lease)
    store_leases(KEYS[k], old[k], s, now, explicit)
  end
  return replies
end
