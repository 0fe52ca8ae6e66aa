-- Sluice, cluster/shadow/claim.rs: CLAIM (one shadow copy): what it takes and returns is documented there.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
