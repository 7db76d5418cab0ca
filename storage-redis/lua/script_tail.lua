-- sluicegate: the last line of a limiter's EVALSHA script: its mode is its first argument.
return run(ARGV[1], KEYS, ARGV)
