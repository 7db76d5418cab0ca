-- sluicegate: the last line of the leases' EVALSHA script: the operation is the first argument.
return lease(ARGV[1], KEYS, ARGV)
