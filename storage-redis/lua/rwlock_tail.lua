-- sluicegate: the last line of the lock family's EVALSHA script: the operation is the first argument.
return rwlock(ARGV[1], KEYS, ARGV)
