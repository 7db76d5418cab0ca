-- tollgate: the function library's registrations (Redis >= 7). The code above is defined
-- once, when the library loads; a call runs only its function. The client puts the
-- library's name, NAME (`tollgate_` and a hash of the library), in every function's name:
-- Redis keeps one namespace of functions, so two releases with different libraries are
-- loaded side by side during a rolling upgrade, each client calling its own.
local function register(suffix, callback, flags)
  redis.register_function({ function_name = NAME .. '_' .. suffix, callback = callback,
    flags = flags or {} })
end

-- A limiter: each mode a function; the arguments as for the script (the first ignored).
register('decide', function(keys, args) return run('decide', keys, args) end)
register('read', function(keys, args) return run('read', keys, args) end, { 'no-writes' })
register('reset', function(keys, args) return run('reset', keys, args) end)
register('purge', function(keys, args) return run('purge', keys, args) end)
register('take', function(keys, args) return run('take', keys, args) end)
register('refund', function(keys, args) return run('refund', keys, args) end)
-- A bucket's decision on its fast path (bucket_fast.lua), else on the general one.
register('bucket', function(keys, args)
  return bucket_fast(keys, args) or run('decide', keys, bucket_args(args[1]))
end)

-- Leases: each operation a function; the arguments as for the script.
register('acquire', function(keys, args) return lease('acquire', keys, args) end)
register('release', function(keys, args) return lease('release', keys, args) end)
register('renew', function(keys, args) return lease('renew', keys, args) end)
register('lease_read', function(keys, args) return lease('read', keys, args) end, { 'no-writes' })
