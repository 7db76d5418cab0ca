-- tollgate: a fenced resource, a hash holding the highest fencing token seen and a value.
-- ARGV: the writer's token, the value. A token below the highest seen is refused (its
-- lease expired and a later holder wrote): returns {0, highest}; else stores both and
-- returns {1, token}.
local highest = redis.call('HGET', KEYS[1], 'token')
local token = tonumber(ARGV[1])
if highest and token < tonumber(highest) then return { 0, tonumber(highest) } end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return { 1, token }
