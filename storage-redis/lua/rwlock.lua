-- sluicegate: read-write locks and fair queues (tag 12), the core's `RwLease` transitions
-- on its bytes: the last token, the last place, the numbers of holders and waiters, then
-- per holder its token, expiry, holds, mode (0 shared, 1 exclusive), owner length and
-- owner, then per waiter its place, expiry, mode, owner length and owner.
-- KEYS[1]: the lock. ARGV: the operation ('acquire', 'try', 'release', 'renew',
-- 'downgrade', 'withdraw', 'read'), now ('' = the server's TIME), the most holders, fair
-- (1) or not (0), the owner, the mode (acquire, try), the ttl (acquire, try, renew), the
-- place's wait (acquire).
-- Replies: acquire and try {allowed, max, remaining, retry, reset, token, expiry, holds,
-- place, ahead, place expiry, woken owner or nil}; release, renew, downgrade {token,
-- expiry, holds, woken owner or nil}; withdraw {woken owner or nil}; read the value.
-- Waking: a call after which the first waiter would be granted pushes one element to that
-- waiter's list (the lock's hash tag, then ':wake:' and the owner), which the waiter pops
-- with BLPOP; nobody else hears of it. An unfair lock's readers, refused without a place,
-- are woken together once a reader would be granted (see `wake_readers`).

local MAX_WAITERS = 1024
local SHARED, EXCLUSIVE = 0, 1

local function lock_error(what)
  error({ err = 'SLUICEGATE lock: ' .. what })
end

-- The state in `bytes` (nil: fresh), checked as the core's decoder checks it.
local function parse_rw(bytes, max, fair)
  local s = { last = 0, place = 0, holders = {}, waiters = {} }
  if not bytes then return s end
  if #bytes < 34 then corrupt('truncated') end
  local version, tag, last, place, held, queued = struct.unpack('>BBI8I8I8I8', bytes)
  if version ~= 1 then corrupt('version') end
  if tag ~= 12 then corrupt('tag') end
  if last > MAX_EXACT or place > MAX_EXACT then corrupt('counter beyond 2^53') end
  if held > max then corrupt('holders') end
  if queued > MAX_WAITERS then corrupt('waiters') end
  s.last, s.place = last, place
  local at, after, owners, writer = 35, 0, {}, false
  local function owner_at(len, fixed)
    if len < 1 or len > 128 then corrupt('owner_len') end
    if #bytes < at + fixed - 1 + len then corrupt('truncated') end
    local who = string.sub(bytes, at + fixed, at + fixed - 1 + len)
    if owners[who] then corrupt('owner') end
    owners[who] = true
    return who
  end
  for k = 1, held do
    if #bytes < at + 39 then corrupt('truncated') end
    local token, expiry, holds, mode, len = struct.unpack('>I8I8I8I8I8', bytes, at)
    if token <= after or token > last then corrupt('token') end
    if expiry > MAX_EXACT then corrupt('expiry beyond 2^53') end
    if holds < 1 then corrupt('holds') end
    if holds > MAX_EXACT then corrupt('holds beyond 2^53') end
    if mode > 1 then corrupt('mode') end
    local who = owner_at(len, 40)
    writer = writer or mode == EXCLUSIVE
    s.holders[k] = { owner = who, mode = mode, token = token, expiry = expiry, holds = holds }
    at, after = at + 40 + len, token
  end
  if writer and held > 1 then corrupt('mode') end
  after = 0
  for k = 1, queued do
    if #bytes < at + 31 then corrupt('truncated') end
    local number, expiry, mode, len = struct.unpack('>I8I8I8I8', bytes, at)
    if number <= after or number > place then corrupt('place') end
    if expiry > MAX_EXACT then corrupt('expiry beyond 2^53') end
    if mode > 1 or (mode == SHARED and not fair) then corrupt('mode') end
    local who = owner_at(len, 32)
    s.waiters[k] = { owner = who, mode = mode, place = number, expiry = expiry }
    at, after = at + 32 + len, number
  end
  if #bytes >= at then corrupt('trailing bytes') end
  return s
end

local function encode_rw(s)
  local parts = { struct.pack('>BBI8I8I8I8', 1, 12, s.last, s.place, #s.holders, #s.waiters) }
  for _, h in ipairs(s.holders) do
    parts[#parts + 1] = struct.pack('>I8I8I8I8I8', h.token, h.expiry, h.holds, h.mode, #h.owner) .. h.owner
  end
  for _, w in ipairs(s.waiters) do
    parts[#parts + 1] = struct.pack('>I8I8I8I8', w.place, w.expiry, w.mode, #w.owner) .. w.owner
  end
  return table.concat(parts)
end

local function lock_fresh_at(s)
  local at = s.last + 1
  for _, h in ipairs(s.holders) do at = math.max(at, h.expiry) end
  for _, w in ipairs(s.waiters) do at = math.max(at, w.expiry) end
  return at
end

-- When the holders (but the one at `except`) that keep a newcomer from `mode` will have
-- expired if none renews; nil when none does.
local function holders_block(s, max, mode, except)
  local count, latest, writer, expiries = 0, nil, nil, {}
  for j, h in ipairs(s.holders) do
    if j ~= except then
      count = count + 1
      expiries[count] = h.expiry
      latest = math.max(latest or 0, h.expiry)
      if h.mode == EXCLUSIVE and not writer then writer = h end
    end
  end
  if mode == EXCLUSIVE then return latest end
  if writer then return writer.expiry end
  if count < max then return nil end
  -- The reader fits once `count - max + 1` of the holders have expired.
  table.sort(expiries)
  return expiries[count - max + 1]
end

-- When the waiters that keep the owner (waiting at `at`) from `mode` will all have
-- dropped out; nil when none does.
local function queue_blocks(s, fair, at, mode)
  local upto
  if fair then
    upto = (at or (#s.waiters + 1)) - 1
  elseif mode == SHARED then
    upto = #s.waiters
  else
    return nil
  end
  local until_at = nil
  for j = 1, upto do
    if j ~= at then until_at = math.max(until_at or 0, s.waiters[j].expiry) end
  end
  return until_at
end

local function next_token(s, now)
  return math.max(s.last + 1, now)
end

-- An acquire (`wait` nil: a try): the holder granted or nil, the instant the blockers are
-- gone, and the caller's index in the queue.
local function ask(s, max, fair, now, owner, mode, ttl, wait)
  local i = index_of(s.holders, owner)
  if i then
    local h = s.holders[i]
    local upgrade = mode == EXCLUSIVE and h.mode == SHARED
    local token = h.token
    if upgrade then
      local blocked = holders_block(s, max, mode, i)
      if blocked then return nil, blocked, nil end
      token = next_token(s, now)
    end
    if h.holds >= MAX_EXACT then lock_error('the owner holds this lease too many times') end
    h.holds = h.holds + 1
    h.expiry = math.max(h.expiry, now + ttl)
    h.token = token
    if upgrade then
      h.mode = EXCLUSIVE
      s.last = token
    end
    return h, now, nil
  end
  local at = index_of(s.waiters, owner)
  local by_queue = queue_blocks(s, fair, at, mode)
  local by_holders = holders_block(s, max, mode, nil)
  if not by_queue and not by_holders then
    local token = next_token(s, now)
    if at then table.remove(s.waiters, at) end
    s.last = token
    local h = { owner = owner, mode = mode, token = token, expiry = now + ttl, holds = 1 }
    s.holders[#s.holders + 1] = h
    return h, now, nil
  end
  local blocked = math.max(by_queue or 0, by_holders or 0)
  if wait and (fair or mode == EXCLUSIVE) then
    if at then
      s.waiters[at].mode = mode
      s.waiters[at].expiry = now + wait
    else
      if #s.waiters >= MAX_WAITERS then lock_error('the queue of this key is full') end
      s.place = s.place + 1
      s.waiters[#s.waiters + 1] = { owner = owner, mode = mode, place = s.place, expiry = now + wait }
      at = #s.waiters
    end
  end
  return nil, blocked, at
end

-- A key beside the lock in its hash slot, so Cluster keeps them on one node.
local function beside(key, suffix)
  local open = string.find(key, '{', 1, true)
  local close = open and string.find(key, '}', open + 1, true)
  if close and close > open + 1 then return key .. suffix end
  return '{' .. key .. '}' .. suffix
end

-- The waiter's list a wake goes to.
local function wake_key(key, owner)
  return beside(key, ':wake:' .. owner)
end

-- Readers an unfair lock refuses without a place name themselves in the set `:readers`
-- (once each however often they ask, at most MAX_WAITERS, until the latest one's wait
-- ends); once a reader would be granted, each is pushed one element to `:readers:wake`,
-- which they pop with BLPOP.
local function count_reader(key, owner, wait)
  local readers = beside(key, ':readers')
  if redis.call('SCARD', readers) >= MAX_WAITERS then return end
  redis.call('SADD', readers, owner)
  local ttl = math.max(math.ceil(wait / 1000), 1)
  if redis.call('PTTL', readers) < ttl then redis.call('PEXPIRE', readers, ttl) end
end

local function wake_readers(key, s, max)
  if #s.waiters > 0 or holders_block(s, max, SHARED, nil) then return end
  local readers = beside(key, ':readers')
  local waiting = redis.call('SCARD', readers)
  if waiting < 1 then return end
  local list = beside(key, ':readers:wake')
  for _ = 1, waiting do redis.call('LPUSH', list, 1) end
  redis.call('PEXPIRE', list, math.max(redis.call('PTTL', readers), 1))
  redis.call('DEL', readers)
end

-- Pushes a wake to the first waiter if it would be granted now (and has none pending);
-- its owner, or nil.
local function wake_next(key, s, max, fair, now, caller)
  local w = s.waiters[1]
  if not w or w.owner == caller then return nil end
  if queue_blocks(s, fair, 1, w.mode) or holders_block(s, max, w.mode, nil) then return nil end
  local list = wake_key(key, w.owner)
  if redis.call('LLEN', list) == 0 then
    redis.call('LPUSH', list, 1)
    redis.call('PEXPIRE', list, math.max(math.ceil((w.expiry - now) / 1000), 1))
  end
  return w.owner
end

-- Writes `s`, or deletes the key once fresh; at the server's time the key lives until
-- fresh, at an explicit time it has no expiry. Returns the time until fresh.
local function store_rw(key, old, s, now, explicit)
  local fresh = lock_fresh_at(s)
  if fresh <= now then
    if old then redis.call('DEL', key) end
    return 0
  end
  if explicit then
    redis.call('SET', key, encode_rw(s))
  else
    redis.call('SET', key, encode_rw(s), 'PX', math.max(math.ceil((fresh - now) / 1000), 1))
  end
  return fresh - now
end

local function rwlock(op, KEYS, ARGV)
  local key = KEYS[1]
  if op == 'read' then return get(key) or false end
  local now, explicit = clock(ARGV[2], true)
  local max, fair, owner = tonumber(ARGV[3]), ARGV[4] == '1', ARGV[5]
  local old = get(key)
  local s = parse_rw(old, max, fair)
  s.holders = live(s.holders, now)
  s.waiters = live(s.waiters, now)

  if op == 'acquire' or op == 'try' then
    local mode, ttl = tonumber(ARGV[6]), tonumber(ARGV[7])
    local wait = op == 'acquire' and tonumber(ARGV[8]) or nil
    local queued = index_of(s.waiters, owner)
    local h, blocked, at = ask(s, max, fair, now, owner, mode, ttl, wait)
    -- A wake left from an earlier turn would end the owner's next wait at once.
    if h and queued then redis.call('DEL', wake_key(key, owner)) end
    local writer = false
    for _, x in ipairs(s.holders) do writer = writer or x.mode == EXCLUSIVE end
    local remaining = writer and 0 or max - #s.holders
    if not h and not at and wait and mode == SHARED and not fair then count_reader(key, owner, wait) end
    local reset = store_rw(key, old, s, now, explicit)
    local woken = wake_next(key, s, max, fair, now, owner)
    local place, ahead, place_expiry = 0, 0, 0
    if at then place, ahead, place_expiry = s.waiters[at].place, at - 1, s.waiters[at].expiry end
    if h then
      return { 1, max, remaining, 0, reset, h.token, h.expiry, h.holds, 0, 0, 0, woken or false }
    end
    return { 0, max, remaining, math.max(blocked - now, 0), reset, 0, 0, 0, place, ahead, place_expiry, woken or false }
  end

  if op == 'withdraw' then
    local at = index_of(s.waiters, owner)
    if not at then lock_error("the owner has no place in this key's queue") end
    table.remove(s.waiters, at)
    redis.call('DEL', wake_key(key, owner))
    store_rw(key, old, s, now, explicit)
    if not fair then wake_readers(key, s, max) end
    return { wake_next(key, s, max, fair, now, owner) or false }
  end

  local i = index_of(s.holders, owner)
  if not i then lock_error('the owner holds no lease on this key (never acquired, released, or expired)') end
  local h = s.holders[i]
  if op == 'release' then
    h.holds = h.holds - 1
    if h.holds == 0 then table.remove(s.holders, i) end
  elseif op == 'renew' then
    h.expiry = now + tonumber(ARGV[7])
  else
    h.mode = SHARED
  end
  store_rw(key, old, s, now, explicit)
  if not fair then wake_readers(key, s, max) end
  return { h.token, h.expiry, h.holds, wake_next(key, s, max, fair, now, owner) or false }
end
