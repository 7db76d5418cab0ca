-- sluicegate: the function library's registrations (Redis >= 7). The code above is defined
-- once, when the library loads; a call runs only its function. The client puts the
-- library's name, NAME (`sluicegate_` and a hash of the library), in every function's name:
-- Redis keeps one namespace of functions, so two releases with different libraries are
-- loaded side by side during a rolling upgrade, each client calling its own.
local function register(suffix, callback, flags)
  redis.register_function({ function_name = NAME .. '_' .. suffix, callback = callback,
    flags = flags or {} })
end

-- A limiter: each mode a function; the arguments as for the script (the first ignored).
local function decide(keys, args) return run('decide', keys, args) end
register('decide', decide)
register('read', function(keys, args) return run('read', keys, args) end, { 'no-writes' })
register('reset', function(keys, args) return run('reset', keys, args) end)
register('remove', function(keys, args) return run('remove', keys, args) end)
register('seed', function(keys, args) return run('seed', keys, args) end)
register('purge', function(keys, args) return run('purge', keys, args) end)
register('take', function(keys, args) return run('take', keys, args) end)
register('refund', function(keys, args) return run('refund', keys, args) end)
register('report', function(keys, args) return run('report', keys, args) end)
-- A bucket's decision on its fast path (bucket_fast.lua), else on the general one; at
-- the server's time `server_now` if given (a batch's), else the time it reads.
local function fast(key, arg, server_now)
  return bucket_fast(key, arg, server_now) or run('decide', { key }, bucket_args(arg))
end
register('bucket', function(keys, args) return fast(keys[1], args[1]) end)

-- Many decisions of one limiter in one call, in order, each made by the function its
-- own call would run ('bucket' or 'decide') with the same arguments, so exactly as if
-- sent alone; the fast path's at one server time, read once for the batch (as the
-- module's batch does). KEYS: each request's keys, ARGV[1] of them each. ARGV[2]: how
-- many arguments a 'decide' takes; then each request's arguments: the fast path's one
-- string, or 'decide' and the rest. The reply is one string of records, one per request
-- (one string parses in one go where an array parses element by element): 0 and the
-- fast path's integer; or 1 and the decision's first six fields; or 2, the length of
-- the error's text and the text (a request's error leaves the others be). Integers are
-- big-endian, signed, 8 bytes; the length 4 bytes.
register('batch', function(keys, args)
  local per, general, count = tonumber(args[1]), tonumber(args[2]), #args
  local now = server_time()
  local out, records, k, i = {}, 0, 0, 3
  while i <= count do
    local ok, r, n
    if args[i] == 'decide' then
      n = general
      ok, r = pcall(decide, { unpack(keys, k + 1, k + per) }, { unpack(args, i, i + n - 1) })
    else
      -- A fast call: a bucket's, one key.
      n = 1
      ok, r = pcall(fast, keys[k + 1], args[i], now)
    end
    records = records + 1
    if not ok then
      local text = type(r) == 'table' and r.err or tostring(r)
      out[records] = struct.pack('>BI4', 2, #text) .. text
    elseif type(r) == 'number' then
      out[records] = struct.pack('>Bi8', 0, r)
    else
      out[records] = struct.pack('>Bi8i8i8i8i8i8', 1, r[1], r[2], r[3], r[4], r[5], r[6])
    end
    k, i = k + per, i + n
  end
  return table.concat(out)
end)

-- Leases: each operation a function; the arguments as for the script.
register('acquire', function(keys, args) return lease('acquire', keys, args) end)
register('release', function(keys, args) return lease('release', keys, args) end)
register('renew', function(keys, args) return lease('renew', keys, args) end)
register('lease_read', function(keys, args) return lease('read', keys, args) end, { 'no-writes' })

-- The lock family: one function, the operation its first argument, as for the script.
register('rwlock', function(keys, args) return rwlock(args[1], keys, args) end)
