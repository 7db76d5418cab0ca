-- sluicegate fleet (split mode): a node's heartbeat. KEYS[1]: the fleet's members, a sorted
-- set of node ids, each scored by the server time (µs) its heartbeat expires at.
-- ARGV[1]: this node's id; ARGV[2]: its heartbeat's time to live in µs, 0 to leave.
-- Registers or removes the node, forgets members whose heartbeat expired, and replies
-- with the server's time, then the live members (in expiry order).
local time = redis.call('TIME')
local now = time[1] * 1000000 + time[2]
local ttl = tonumber(ARGV[2]) or 0
if ttl > 0 then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
if ttl > 0 then
  -- The set itself goes when the latest heartbeat would have (a node leaving leaves
  -- the others' expiry alone).
  redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000))
end
table.insert(members, 1, now)
return members
