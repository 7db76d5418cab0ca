-- sluicegate: a bucket script's first lines: a fast call (one argument) is decided before
-- the rest of the script defines anything; one the fast path leaves goes to the tail.
if #ARGV == 1 then
  local reply = bucket_fast(KEYS[1], ARGV[1])
  if reply then return reply end
end
