-- sluicegate: a bucket script's fast call the fast path left, on the general path.
if #ARGV == 1 then return run('decide', KEYS, bucket_args(ARGV[1])) end
