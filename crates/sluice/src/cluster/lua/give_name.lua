-- Sluice, cluster/owner.rs: GIVE_BACK: what it takes and returns is documented there.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 1
