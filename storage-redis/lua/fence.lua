-- sluicegate: a fenced resource, a hash holding the highest fencing token seen from each
-- source and a value. ARGV: the value, then pairs of a source's field and the writer's
-- token from that source (one pair, field `token`, for a lock on one server; one pair
-- per granting server for a Redlock). A token below the highest seen from its source is
-- refused (its lease expired and a later holder wrote): returns {0, token, highest};
-- else stores every token and the value and returns {1}.
for i = 2, #ARGV, 2 do
  local highest = redis.call('HGET', KEYS[1], ARGV[i])
  if highest and tonumber(ARGV[i + 1]) < tonumber(highest) then
    return { 0, tonumber(ARGV[i + 1]), tonumber(highest) }
  end
end
redis.call('HSET', KEYS[1], 'value', ARGV[1], unpack(ARGV, 2))
return { 1 }
